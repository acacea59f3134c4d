"""ONNX for common ATen ops torch_lib does not list in the form tracejit records them.

torch's own exporter decomposes these before it looks them up, so torch_lib has no entry; a trace
records them as Python called them (``1 - x`` is ``aten::rsub.Scalar``, ``x.var(1)`` is
``aten::var.dim``). Each handler gives eager's answer, edge values included:

- ``rsub`` (``1 - x``, ``torch.rsub``): ``other - alpha * self`` in the result's dtype.
- ``var`` / ``std`` / ``var_mean`` / ``std_mean`` (``dim`` / ``correction`` / default overloads):
  ``sum((x - mean)^2) / max(N - correction, 0)``, so too few elements give NaN / inf as in eager.
- ``fmax`` / ``fmin``: the other operand where one is NaN (ONNX's Max / Min propagate it).
- ``nan_to_num``: NaN, +inf and -inf replaced (defaults: 0 and the dtype's largest / lowest value).
- ``x >> k`` (listed, but its conversion is wrong in OpenVINO for negative values): a floor division.
- ``broadcast_tensors``, ``adaptive_max_pool2d`` to size 1 (values and indices), ``median()``.
- ``square`` (transformers' RWKV) as ``x * x`` in the result's dtype; ``eye(n[, m])`` (XLNet), sizes that may be
  traced, as ``EyeLike`` of a zero matrix; ``x.T`` (Falcon), ``x.H``, ``x.adjoint()`` of a real tensor as a
  ``Transpose``; ``_weight_norm`` (recorded as eager runs it, for its fused kernel's bits) as ATen's composite.
"""
from __future__ import annotations

import torch

from ..ops import split_name
from ._deps import require
from .dtypes import onnx_dtype
from .edge_values import element_count, reduced_dims
from .special_ops import constant_like, handles
from .torch_lib_lookup import lookup

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


def _operand(cx, value, dtype):
    """A tensor operand cast to ``dtype``, or a Python number as a constant of it."""
    if isinstance(value, ir.Value):
        return value if value.dtype == dtype else op.Cast(value, to=dtype)
    return cx.builder._get_or_create_constant(value, dtype)


@handles("aten::rsub.Scalar", "aten::rsub.Tensor")
def rsub(cx, node, args, kwargs):
    dtype = node.outputs[0].type.dtype
    want = onnx_dtype(dtype)
    x, other = _operand(cx, args[0], want), _operand(cx, args[1], want)
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        x = op.Mul(x, _operand(cx, alpha, want))
    return [op.Sub(other, x)]


def _moments(cx, node, args, kwargs):
    """(x, axes, keepdim, correction, rank) of a var / std / var_mean / std_mean node."""
    x, rank = args[0], len(node.args[0].type.shape)
    overload = split_name(node.op).overload
    if overload == "correction":
        dims = args[1] if len(args) > 1 else None
        correction = kwargs.get("correction", None)
        correction = 1 if correction is None else correction
        keepdim = kwargs.get("keepdim", False)
    elif overload == "dim":
        dims, unbiased, keepdim = (list(args) + [None, True, False])[1:4]
        correction = 1 if unbiased else 0
    else:   # var(x, unbiased=True): every dimension
        dims, correction, keepdim = None, 1 if (args[1] if len(args) > 1 else True) else 0, False
    return x, reduced_dims(dims, rank, "var / std"), bool(keepdim), correction, rank


def _variance(cx, x, axes: list, keepdim: bool, correction):
    """(variance, mean): ``sum((x - mean)^2) / max(N - correction, 0)``."""
    if not axes:   # a 0-d tensor: eager's variance of one element
        count = constant_like(cx, 1.0, x)
        mean = op.Identity(x)
        squares = op.Mul(op.Sub(x, mean), op.Sub(x, mean))
    else:
        axes_value = op.Constant(value_ints=axes)
        count = element_count(x, axes_value)
        mean = op.Div(op.ReduceSum(x, axes_value, keepdims=1), count)
        centered = op.Sub(x, mean)
        squares = op.ReduceSum(op.Mul(centered, centered), axes_value, keepdims=1 if keepdim else 0)
        if not keepdim:
            mean = op.Squeeze(mean, axes_value)
    dof = op.Max(op.Sub(count, constant_like(cx, float(correction), x)), constant_like(cx, 0.0, x))
    return op.Div(squares, dof), mean


@handles("aten::var.dim", "aten::var.correction", "aten::var.default", "aten::std.dim", "aten::std.correction",
         "aten::std.default", "aten::var_mean.dim", "aten::var_mean.correction", "aten::var_mean.default",
         "aten::std_mean.dim", "aten::std_mean.correction", "aten::std_mean.default")
def variance(cx, node, args, kwargs):
    x, axes, keepdim, correction, _ = _moments(cx, node, args, kwargs)
    if x.dtype not in _FLOATS:
        raise NotImplementedError(f"{node.op} of a {x.dtype} tensor (eager refuses it too)")
    var, mean = _variance(cx, x, axes, keepdim, correction)
    name = split_name(node.op).name
    out = op.Sqrt(var) if name.startswith("std") else var
    return [out, mean] if name.endswith("_mean") else [out]


@handles("aten::fmax.default", "aten::fmin.default")
def fmax_fmin(cx, node, args, kwargs):
    want = onnx_dtype(node.outputs[0].type.dtype)
    a, b = _operand(cx, args[0], want), _operand(cx, args[1], want)
    both = (op.Max if node.op.startswith("aten::fmax") else op.Min)(a, b)
    if want not in _FLOATS:
        return [both]
    return [op.Where(op.IsNaN(a), b, op.Where(op.IsNaN(b), a, both))]


@handles("aten::nan_to_num.default")
def nan_to_num(cx, node, args, kwargs):
    x = args[0]
    nan, posinf, neginf = (list(args) + [None, None, None])[1:4]
    if x.dtype not in _FLOATS:
        return [op.Identity(x)]
    info = torch.finfo(node.args[0].type.dtype)
    x = op.Where(op.IsNaN(x), constant_like(cx, 0.0 if nan is None else float(nan), x), x)
    x = op.Where(op.IsInf(x, detect_negative=0), constant_like(cx, info.max if posinf is None else float(posinf), x), x)
    return [op.Where(op.IsInf(x, detect_positive=0), constant_like(cx, info.min if neginf is None else float(neginf), x), x)]


@handles("aten::__rshift__.Scalar", "aten::bitwise_right_shift.Tensor_Scalar")
def right_shift_by_number(cx, node, args, kwargs):
    """``x >> k`` of a signed integer tensor by a number: floor division by 2**k, written as
    ``(x - x mod 2**k) / 2**k`` (torch_lib's detour through unsigned types gives OpenVINO -70 for
    eager's ``-283 >> 2 == -71``)."""
    x, shift = args[0], args[1]
    if not isinstance(shift, int) or not 0 <= shift < 63 or x.dtype not in (
            ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64):
        return cx._call_torch_lib(lookup("aten::bitwise_right_shift.Tensor_Scalar"), args, kwargs)
    divisor = constant_like(cx, 1 << shift, x)
    return [op.Div(op.Sub(x, op.Mod(x, divisor)), divisor)]   # Mod (fmod=0) takes the divisor's sign


@handles("aten::broadcast_tensors.default")
def broadcast_tensors(cx, node, args, kwargs):
    """Every tensor expanded to the shape they broadcast to (ONNX's Expand broadcasts both ways)."""
    tensors = list(args[0])
    target = op.Shape(tensors[0])
    for t in tensors[1:]:
        target = op.Shape(op.Expand(t, target))
    return [op.Expand(t, target) for t in tensors]


@handles("aten::adaptive_max_pool2d.default")
def adaptive_max_pool2d(cx, node, args, kwargs):
    """Output size 1 only: the maximum of each plane (batched or not) and its index in the flattened
    plane (the first one, as eager's)."""
    x, size = args[0], args[1]
    if not all(isinstance(s, int) and s == 1 for s in size):
        raise NotImplementedError(f"adaptive max pooling to size {list(size)} (only an output size of 1 converts)")
    rank = len(node.args[0].type.shape)
    outer = op.Shape(x, end=rank - 2)
    flat = op.Reshape(x, op.Concat(outer, op.Constant(value_ints=[-1]), axis=0))
    index = op.ArgMax(flat, axis=-1, keepdims=1, select_last_index=0)
    ones = op.Constant(value_ints=[1, 1])
    return [op.ReduceMax(x, op.Constant(value_ints=[-2, -1]), keepdims=1), op.Reshape(index, op.Concat(outer, ones, axis=0))]


@handles("aten::median.default")
def median(cx, node, args, kwargs):
    """The lower median of all elements (eager's ``x.median()``): the ((n - 1) // 2)-th smallest."""
    x = op.Reshape(args[0], op.Constant(value_ints=[-1]))
    n = op.Shape(x)
    k = op.Add(op.Div(op.Sub(n, op.Constant(value_ints=[1])), op.Constant(value_ints=[2])),
               op.Constant(value_ints=[1]))
    smallest, _ = op.TopK(x, k, axis=0, largest=0, sorted=1)
    return [op.Squeeze(op.Gather(smallest, op.Sub(k, op.Constant(value_ints=[1]))), op.Constant(value_ints=[0]))]


@handles("aten::square.default")
def square(cx, node, args, kwargs):
    x = _operand(cx, args[0], onnx_dtype(node.outputs[0].type.dtype))   # bool squares to int64, as eager
    return [op.Mul(x, x)]


@handles("aten::eye.default", "aten::eye.m")
def eye(cx, node, args, kwargs):
    n = args[0]
    m = args[1] if node.op.endswith(".m") else n
    dims = [op.Reshape(op.Cast(v, to=ir.DataType.INT64), op.Constant(value_ints=[1])) if isinstance(v, ir.Value)
            else op.Constant(value_ints=[int(v)]) for v in (n, m)]
    zeros = op.ConstantOfShape(op.Concat(*dims, axis=0))
    return [op.EyeLike(zeros, dtype=onnx_dtype(node.outputs[0].type.dtype))]


@handles("aten::numpy_T.default", "aten::matrix_H.default", "aten::adjoint.default")
def transposed(cx, node, args, kwargs):
    """``x.T`` (every dimension reversed), ``x.H`` (a matrix's) and ``x.adjoint()`` (the last two swapped): the
    conjugate of a real tensor is itself."""
    t = node.args[0].type
    if t.dtype.is_complex:
        raise NotImplementedError(f"{node.op} of a complex tensor (ONNX has no complex tensors)")
    rank = len(t.shape)
    perm = list(range(rank))[::-1]
    if node.op.startswith("aten::adjoint") and rank >= 2:
        perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return [op.Transpose(args[0], perm=perm)]


@handles("aten::_weight_norm.default")
def weight_norm(cx, node, args, kwargs):
    """``torch._weight_norm(v, g, dim)`` (nn.utils.weight_norm: wav2vec2's positional convolution) as ATen's
    composite: ``v * (g / ||v||)``, the norm over every dimension but ``dim`` (over all of them for -1)."""
    v, g = args[0], args[1]
    dim = kwargs.get("dim", args[2] if len(args) > 2 else 0)
    rank = len(node.args[0].type.shape)
    if not isinstance(dim, int) or not -rank <= dim < max(rank, 1):
        raise NotImplementedError(f"_weight_norm over dim {dim!r} of a rank-{rank} tensor")
    axes = list(range(rank)) if dim == -1 else [i for i in range(rank) if i != dim % rank]
    norm = op.ReduceL2(v, op.Constant(value_ints=axes), keepdims=1) if axes else op.Abs(v)
    return [op.Mul(v, op.Div(g, norm))]
