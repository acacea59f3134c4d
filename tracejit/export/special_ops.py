"""Conversions torch_lib does not have in the form tracejit records.

tracejit records ops as Python called them, before torch's decompositions, so a few reach the
exporter in a form torch_lib's registry does not list (``aten::batch_norm``, Python size
arithmetic, ``x.float()`` as ``aten::to`` without its dtype). Each handler takes the lowering
context, the node and its converted (schema-ordered) args and kwargs, and returns the ONNX values.
"""
from __future__ import annotations

from ._deps import require
from .dtypes import SCALAR_TO_ONNX, onnx_dtype

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

HANDLERS: dict = {}


def handles(*names):
    def register(fn):
        for name in names:
            HANDLERS[name] = fn
        return fn
    return register


def constant_like(cx, value, like):
    """A Python number as an ONNX constant of ``like``'s dtype (shared per value by the builder)."""
    return cx.builder._get_or_create_constant(value, like.dtype)


def _rank(node, i=0) -> int:
    return len(node.args[i].type.shape)


@handles("aten::size.int", "aten::sym_size.int")
def size_int(cx, node, args, kwargs):
    dim = args[1]
    if not isinstance(dim, int):
        raise TypeError("size(dim) with a traced dim")
    dim = dim % _rank(node) if _rank(node) else 0
    return [op.Squeeze(op.Shape(args[0], start=dim, end=dim + 1), [0])]


def _scalar_dtype(node):
    return SCALAR_TO_ONNX[node.outputs[0].type.kind]


@handles("aten::item.default", "aten::item")
def item(cx, node, args, kwargs):
    """``t.item()`` of a 0-d tensor the trace reads as an int where an op takes one (trace/int_tensors.py: a
    ``torch.div`` of sizes used as a size): the same 0-d tensor, in the scalar's dtype."""
    x = args[0]
    if len(node.args[0].type.shape) != 0:
        raise NotImplementedError("item() of a tensor that is not 0-d")
    dtype = _scalar_dtype(node)
    return [x if x.dtype == dtype else op.Cast(x, to=dtype)]


def _scalars(cx, node, args):
    """Both operands as 0-d tensors of the result's dtype."""
    dtype = _scalar_dtype(node)
    out = []
    for a in args[:2]:
        if isinstance(a, ir.Value):
            out.append(a if a.dtype == dtype else op.Cast(a, to=dtype))
        else:
            out.append(cx.builder._get_or_create_constant(a, dtype))
    return out


@handles("aten::add.int", "aten::add.float", "aten::add.int_float", "aten::add.float_int")
def add_scalar(cx, node, args, kwargs):
    a, b = _scalars(cx, node, args)
    return [op.Add(a, b)]


@handles("aten::sub.int", "aten::sub.float")
def sub_scalar(cx, node, args, kwargs):
    a, b = _scalars(cx, node, args)
    return [op.Sub(a, b)]


@handles("aten::mul.int", "aten::mul.float", "aten::mul.int_float", "aten::mul.float_int")
def mul_scalar(cx, node, args, kwargs):
    a, b = _scalars(cx, node, args)
    return [op.Mul(a, b)]


@handles("aten::floordiv.int")
def floordiv_int(cx, node, args, kwargs):
    a, b = (op.Cast(v, to=ir.DataType.DOUBLE) for v in _scalars(cx, node, args))
    return [op.Cast(op.Floor(op.Div(a, b)), to=ir.DataType.INT64)]


@handles("aten::remainder.int", "aten::mod.int")
def mod_int(cx, node, args, kwargs):
    a, b = _scalars(cx, node, args)
    return [op.Mod(a, b)]   # fmod=0: the sign of the divisor, as Python's %


@handles("aten::to.dtype", "aten::to.dtype_layout", "aten::to.device", "aten::to.prim_Device", "aten::to.other", "aten::to.prim_dtype",
         "aten::type_as.default", "aten::_to_copy.default", "aten::type.default")
def cast_to_output(cx, node, args, kwargs):
    """``x.to(...)``, ``x.float()``, ``x.type_as(y)``: a Cast to the dtype the trace saw."""
    x = args[0]
    want = onnx_dtype(node.outputs[0].type.dtype)
    return [op.Identity(x) if x.dtype == want else op.Cast(x, to=want)]


@handles("aten::batch_norm.default")
def batch_norm(cx, node, args, kwargs):
    x, weight, bias, mean, var, training, momentum, eps = args[:8]
    if training and mean is None and var is None:
        return [_batch_statistics_norm(cx, x, weight, bias, float(eps))]
    if training:
        raise NotImplementedError("batch_norm in training mode updates its running statistics (call .eval() on "
                                  "the module that owns them before tracing)")
    if weight is None or bias is None or mean is None or var is None:
        raise NotImplementedError("batch_norm without weight, bias or running statistics")
    return [op.BatchNormalization(x, weight, bias, mean, var, epsilon=float(eps), momentum=1.0 - float(momentum))]


def _batch_statistics_norm(cx, x, weight, bias, eps: float):
    """``F.batch_norm(x, None, None, training=True)`` (NFNet's weight standardisation): normalized by the
    biased mean and variance over every dim but the channels (dim 1); nothing is updated."""
    flat = op.Reshape(x, op.Concat(op.Shape(x, start=0, end=2), [-1], axis=0))   # (N, C, rest)
    mean = op.ReduceMean(flat, [0, 2], keepdims=1)
    centered = op.Sub(flat, mean)
    var = op.ReduceMean(op.Mul(centered, centered), [0, 2], keepdims=1)
    out = op.Div(centered, op.Sqrt(op.Add(var, constant_like(cx, eps, var))))
    if weight is not None:
        out = op.Mul(out, op.Unsqueeze(weight, [0, 2]))
    if bias is not None:
        out = op.Add(out, op.Unsqueeze(bias, [0, 2]))
    return op.Reshape(out, op.Shape(x))


@handles("aten::swapaxes.default", "aten::swapdims.default")
def swapaxes(cx, node, args, kwargs):
    return [cx.call_aten("aten::transpose.int", [args[0], args[1], args[2]])]


@handles("aten::zero.default")
def zero(cx, node, args, kwargs):
    """``x.zero_()`` in functional form (export writes it back, view_writes.py)."""
    return [op.Expand(constant_like(cx, 0, args[0]), op.Shape(args[0]))]


@handles("aten::reshape_as.default")
def reshape_as(cx, node, args, kwargs):
    return [op.Reshape(args[0], op.Shape(args[1]))]


@handles("aten::adaptive_avg_pool1d.default", "aten::adaptive_avg_pool2d.default",
         "aten::adaptive_avg_pool3d.default")
def adaptive_avg_pool(cx, node, args, kwargs):
    """Size 1: GlobalAveragePool. Any other size: per pooled axis a 0/1 bin matrix (bin i covers
    ``floor(i * L / o) <= j < ceil((i + 1) * L / o)``, computed from the input's size at run time), the
    sums as MatMuls, divided by the bins' element counts: eager's sum / count, for any input size."""
    x, size = args[0], list(args[1])
    if not all(isinstance(s, int) and s >= 1 for s in size):
        raise NotImplementedError(f"adaptive average pooling to size {size} (a traced or empty size)")
    if all(s == 1 for s in size):
        return [op.GlobalAveragePool(x)]
    rank = _rank(node)
    count = None
    for k, o in enumerate(size):
        axis = rank - len(size) + k
        mask, n = _bins(cx, x, axis, o)
        if axis == rank - 1:
            x = op.MatMul(x, op.Transpose(mask, perm=[1, 0]))
        elif axis == rank - 2:
            x = op.MatMul(mask, x)
        else:
            perm = list(range(rank))
            perm[axis], perm[rank - 1] = rank - 1, axis
            x = op.Transpose(op.MatMul(op.Transpose(x, perm=perm), op.Transpose(mask, perm=[1, 0])), perm=perm)
        n = op.Reshape(n, [-1] + [1] * (len(size) - 1 - k))
        count = n if count is None else op.Mul(count, n)
    return [op.Div(x, op.CastLike(count, x))]


def _bins(cx, x, axis: int, o: int):
    """(the 0/1 matrix [o, L] of the bins along ``axis``, each bin's element count [o] as int64)."""
    length = op.Shape(x, start=axis, end=axis + 1)
    i = op.Constant(value=ir.tensor(list(range(o)), dtype=ir.DataType.INT64))
    o_c = op.Constant(value=ir.tensor([o], dtype=ir.DataType.INT64))
    start = op.Div(op.Mul(i, length), o_c)
    one = op.Constant(value_int=1)
    end = op.Div(op.Add(op.Mul(op.Add(i, one), length), op.Sub(o_c, one)), o_c)   # ceil((i + 1) * L / o)
    j = op.Range(op.Constant(value_int=0), op.Squeeze(length, [0]), op.Constant(value_int=1))
    col = op.Unsqueeze(j, [0])
    inside = op.And(op.GreaterOrEqual(col, op.Unsqueeze(start, [1])), op.Less(col, op.Unsqueeze(end, [1])))
    return op.CastLike(inside, x), op.Sub(end, start)


@handles("aten::tensor.float", "aten::tensor.int", "aten::tensor.bool")
def tensor_of_number(cx, node, args, kwargs):
    """``torch.tensor(number)`` (DeBERTa-v2's log buckets): a 0-d tensor of the traced result's dtype;
    a traced number (a size) is cast at run time."""
    dtype = onnx_dtype(node.outputs[0].type.dtype)
    if isinstance(args[0], ir.Value):
        return [op.Cast(args[0], to=dtype)]
    return [op.Constant(value=ir.tensor(args[0], dtype=dtype))]


@handles("aten::as_tensor.list", "aten::tensor.default")
def tensor_of_list(cx, node, args, kwargs):
    """``torch.as_tensor([0.485, 0.456, 0.406])``, ``torch.tensor([k])`` (torchvision's detection transform
    and top-k bound): a tensor of the traced result's dtype; a list, flat or nested, may hold traced numbers
    (sizes: Mask2Former's ``torch.tensor([[shape[1], shape[0]] for shape in spatial_shapes_list])``)."""
    data, dtype = args[0], onnx_dtype(node.outputs[0].type.dtype)
    if not isinstance(data, (list, tuple)):
        raise NotImplementedError("data that is not a list")
    if _numbers(data):
        return [op.Constant(value=ir.tensor(data, dtype=dtype))]
    flat, shape = _flat_rectangle(data)   # a nested list (Mask2Former's [[h, w] for each level]): row-major
    one = op.Constant(value=ir.tensor([1], dtype=ir.DataType.INT64))
    parts = [op.Reshape(op.Cast(x, to=dtype), one) if isinstance(x, ir.Value)
             else op.Constant(value=ir.tensor([x], dtype=dtype)) for x in flat]
    joined = op.Concat(*parts, axis=0)
    if len(shape) == 1:
        return [joined]
    return [op.Reshape(joined, op.Constant(value=ir.tensor(list(shape), dtype=ir.DataType.INT64)))]


def _flat_rectangle(data) -> tuple[list, tuple]:
    """The numbers of a nested list in row-major order and its shape; NotImplementedError where it is ragged or
    holds something other than numbers and traced numbers (the trace fixed the nesting: only the numbers move)."""
    if all(isinstance(x, (bool, int, float, ir.Value)) for x in data):
        return list(data), (len(data),)
    if not data or not all(isinstance(x, (list, tuple)) for x in data):
        raise NotImplementedError("a list mixing numbers and lists, or holding other objects")
    inner = [_flat_rectangle(x) for x in data]
    if any(shape != inner[0][1] for _, shape in inner):
        raise NotImplementedError("a ragged nested list")
    return [v for flat, _ in inner for v in flat], (len(data), *inner[0][1])


@handles("aten::meshgrid.indexing", "aten::meshgrid.default")
def meshgrid(cx, node, args, kwargs):
    """``torch.meshgrid(ys, xs, indexing="ij")`` (torchvision's anchor grid): each 1-D input reshaped to
    its own axis and expanded to the grid; ``"xy"`` swaps the first two axes."""
    tensors = list(args[0])
    if any(len(v.type.shape) != 1 for v in node.args[0]):
        raise NotImplementedError("meshgrid of tensors that are not 1-D")
    n = len(tensors)
    order = [1, 0, *range(2, n)] if kwargs.get("indexing", "ij") == "xy" and n >= 2 else list(range(n))
    grid = op.Concat(*[op.Shape(tensors[j]) for j in order], axis=0)
    out = []
    for i, t in enumerate(tensors):
        shape = [1] * n
        shape[order.index(i)] = -1
        out.append(op.Expand(op.Reshape(t, op.Constant(value=ir.tensor(shape, dtype=ir.DataType.INT64))), grid))
    return out


@handles("aten::where.default")
def where_nonzero(cx, node, args, kwargs):
    """``torch.where(condition)`` (torchvision's small-box filter): ``nonzero(as_tuple=True)``, one int64
    index tensor per dimension."""
    found = op.NonZero(args[0])
    return [op.Gather(found, op.Constant(value_int=i), axis=0) for i in range(_rank(node))]


@handles("aten::conv_transpose1d.default", "aten::conv_transpose2d.input", "aten::conv_transpose3d.input")
def conv_transpose(cx, node, args, kwargs):
    """``F.conv_transpose2d`` (Mask R-CNN's mask head) as ONNX ConvTranspose: the weight's layout is
    torch's (in, out / groups, kernel...), padding on both sides of each axis."""
    x, weight, bias, stride, padding, output_padding, groups, dilation = (list(args) + [None] * 8)[:8]
    if not all(isinstance(v, int) for v in (*stride, *padding, *output_padding, *dilation, groups)):
        raise NotImplementedError("a stride, padding or dilation computed by the trace")
    inputs = [x, weight] + ([bias] if bias is not None else [])
    return [op.ConvTranspose(*inputs, strides=list(stride), pads=list(padding) * 2, output_padding=list(output_padding),
                             dilations=list(dilation), group=groups)]


@handles("aten::threshold.default")
def threshold(cx, node, args, kwargs):
    """``F.threshold(x, threshold, value)`` (``nn.Threshold``): ``value`` where ``x <= threshold``, else ``x``,
    as torch's kernel writes it (a NaN is not ``<=`` anything, so it stays NaN, as in eager); both numbers in
    ``x``'s dtype, as the kernel converts them."""
    x, limit, value = args[0], args[1], args[2]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (limit, value)):
        raise NotImplementedError("a threshold or value computed by the trace")
    return [op.Where(op.LessOrEqual(x, constant_like(cx, limit, x)), constant_like(cx, value, x), x)]


@handles("aten::numel.default")
def numel(cx, node, args, kwargs):
    """``x.numel()`` as a traced number (torchvision's batched_nms): the product of the shape, int64."""
    return [op.ReduceProd(op.Shape(args[0]), keepdims=0)]


@handles("aten::_shape_as_tensor.default")
def shape_as_tensor(cx, node, args, kwargs):
    """``torch._shape_as_tensor(x)`` (torchvision's box clipping under tracing): the shape, int64."""
    return [op.Shape(args[0])]


def _numbers(data) -> bool:
    if isinstance(data, (list, tuple)):
        return all(_numbers(x) for x in data)
    return isinstance(data, (bool, int, float))


@handles("aten::softmax.int", "aten::log_softmax.int")
def softmax(cx, node, args, kwargs):
    x, dim = args[0], args[1]
    dtype = args[2] if len(args) > 2 else None
    if dtype is not None:
        x = op.Cast(x, to=dtype)
    fn = op.Softmax if node.op.startswith("aten::softmax") else op.LogSoftmax
    return [fn(x, axis=dim)]


@handles("aten::diff.default")
def diff(cx, node, args, kwargs):
    x, n, dim, prepend, append = (list(args) + [1, -1, None, None])[:5]
    if n != 1:
        raise NotImplementedError(f"diff with n={n} (only n=1 converts)")
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = op.Concat(*parts, axis=dim)
    big = 2 ** 62
    return [op.Sub(op.Slice(x, [1], [big], [dim]), op.Slice(x, [0], [-1], [dim]))]
