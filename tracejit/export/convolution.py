"""ONNX for a convolution without a bias: a ``Conv`` without the optional bias input.

torch_lib's ``aten::conv1d`` / ``conv2d`` / ``conv3d`` build a zero bias when there is none
(``Expand(CastLike(0.0, x), Expand(Shape(weight, 0, 1), [1]))``: four nodes computed from the
weight's shape at run time). onnxruntime's NCHWc layout transformer takes a Conv only when its
bias is an initializer, so such a conv stays in plain NCHW and the blocked layout is left and
re-entered around it (DenseNet-121, whose dense layers end in a bias-free conv: 61 such chains,
ReorderInput / ReorderOutput pairs between the layers, its BatchNormalizations not turned into
blocked convs; 1.3x the run time of torch.onnx's file). ``Conv`` without a bias computes the
convolution alone, which is eager's math (no ``+ 0.0``). With a bias torch_lib's conversion is used as before.

A padding given as a string (``nn.Conv2d(..., padding="valid")``: SigLIP's and EfficientNet's patch / stem
convs in transformers; ``"same"``) is ``aten::conv2d.padding``, which torch_lib wrote with the string as the
``pads`` attribute (the checker refused the model). Here it is a ``Conv`` with the pads torch computes: none
for ``"valid"``; for ``"same"`` (stride 1) ``dilation * (kernel - 1)`` per axis, the odd one at the end.
"""
from __future__ import annotations

from ._deps import require
from .schema_args import bind
from .special_ops import handles

require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

BIAS_FREE = tuple(f"aten::conv{d}d.default" for d in (1, 2, 3))


def static_groups(node, args: list) -> list:
    """``args`` (schema order) with a traced ``groups`` (``groups=x.shape[1]``: transformers' Mamba, a depthwise
    conv) replaced by its value, which the weight fixes: the input's channels (traced type) over the weight's
    second dimension. ONNX's ``group`` is an attribute; torch_lib failed on the traced value."""
    if len(args) < 7 or isinstance(args[6], int) or args[6] is None:
        return args
    traced = bind(node.op, node.args, node.kwargs)[0]   # the IR values, in schema order too
    x, weight = traced[0].type.shape, traced[1].type.shape
    channels = x[1] if len(x) == len(weight) else x[0]   # batched, or an unbatched conv1d / conv2d input
    if not isinstance(channels, int) or not isinstance(weight[1], int):
        raise NotImplementedError("a convolution whose groups is a traced size and whose channels are not fixed")
    return args[:6] + [channels // weight[1]] + args[7:]


@handles(*BIAS_FREE)
def conv_without_bias(cx, node, args, kwargs):
    """``F.conv2d(x, w, None, ...)`` as ``aten::convolution`` (torch_lib's, which passes a missing bias on as
    a missing input); any other call as torch_lib's conversion of the op itself."""
    args = static_groups(node, list(args))
    x, weight, bias, stride, padding, dilation, groups = (list(args) + [None] * 7)[:7]
    if bias is not None or kwargs.get("bias") is not None or isinstance(padding, str):
        return cx.call_aten(node.op, args, kwargs)
    rank = len(bind(node.op, node.args, node.kwargs)[0][1].type.shape) - 2
    stride, padding, dilation = (_per_axis(v, default, rank) for v, default in
                                 ((stride, 1), (padding, 0), (dilation, 1)))
    return cx.call_aten("aten::convolution", [x, weight, None, stride, padding, dilation, False, [0] * rank,
                                              1 if groups is None else groups])


def _per_axis(value, default: int, rank: int) -> list:
    """A conv argument (None, an int, or one or ``rank`` ints) as ``rank`` values."""
    if value is None:
        return [default] * rank
    if not isinstance(value, (list, tuple)):
        return [value] * rank
    return list(value) * rank if len(value) == 1 else list(value)


@handles(*(f"aten::conv{d}d.padding" for d in (1, 2, 3)))
def conv_with_named_padding(cx, node, args, kwargs):
    x, weight, bias, stride, padding, dilation, groups = (static_groups(node, list(args)) + [None] * 7)[:7]
    kernel = list(bind(node.op, node.args, node.kwargs)[0][1].type.shape[2:])
    if not all(isinstance(k, int) for k in kernel) or padding not in ("valid", "same"):
        raise NotImplementedError(f"a convolution with padding={padding!r} and kernel {kernel}")
    rank = len(kernel)
    stride, dilation = _per_axis(stride, 1, rank), _per_axis(dilation, 1, rank)
    if padding == "same":
        total = [d * (k - 1) for d, k in zip(dilation, kernel)]
        pads = [t // 2 for t in total] + [t - t // 2 for t in total]
    else:
        pads = [0] * (2 * rank)
    inputs = [x, weight] if bias is None else [x, weight, bias]
    return [op.Conv(*inputs, pads=pads, strides=stride, dilations=dilation, group=1 if groups is None else groups)]
