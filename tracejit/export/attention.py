"""ONNX for ``aten::scaled_dot_product_attention``: eager's answer, in the form runtimes fuse.

torch_lib's conversion gives another answer than eager where a mask hides a whole row (a query
that may see no key, e.g. a batch of padding): eager returns zeros there, torch_lib's bool-mask
form the mean of the values (it fills with the dtype's minimum, then looks for NaN) and its
float-mask form NaN. This conversion computes

    out = softmax(q @ k^T * scale + bias) @ v * visible

where ``bias`` is 0 / ``MASKED`` for a bool mask or the float mask with -inf raised to ``MASKED``
(both give exp(...) = 0 exactly beside any visible key), and ``visible`` is 1 where the row sees a
key (a bool mask with a True, a float mask with a value above -inf) and 0 elsewhere. So a hidden
row is zero, as in eager, and the chain MatMul / Add / Softmax / MatMul stays whole: OpenVINO
fuses it into one attention kernel, which torch_lib's NaN check inside the chain prevented.
The key is transposed with a static permutation (ranks are fixed) and the scale is a constant
when the graph knows the head size. ``dropout_p > 0`` is refused: the ONNX model would not drop, eager does.
"""
from __future__ import annotations

import math

from ._deps import require
from .special_ops import constant_like, handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402


MASKED = -3.0e38   # a hidden key's bias: finite, so a hidden row stays finite and multiplying by 0 clears it


def _static(dim) -> int | None:
    return dim if isinstance(dim, int) else None


def _scaled(cx, node, q, scale):
    """``sqrt(scale)`` to multiply q and k^T by (torch's math kernel scales both, for fp16's range).
    Without ``scale``: ``size(-1) ** -0.25``, a constant when the ONNX graph knows the head size
    (BERT's is fixed by a reshape), read from the shape when it is an input's dynamic axis."""
    if scale is not None:
        return constant_like(cx, math.sqrt(float(scale)), q)
    head = _static(q.shape[-1]) if q.shape is not None and len(q.shape) else None
    if head is not None:
        return constant_like(cx, head ** -0.25, q)
    size = op.CastLike(op.Shape(q, start=-1), q)
    return op.Reciprocal(op.Sqrt(op.Sqrt(size)))


def _repeat_heads(q, kv, rank: int):
    """``enable_gqa``: each key / value head serves ``Hq / Hkv`` query heads, as repeat_interleave
    on dim -3 gives (head j reads key head j // (Hq / Hkv))."""
    outer, heads = op.Shape(kv, end=rank - 3), op.Shape(kv, start=rank - 3, end=rank - 2)
    inner = op.Shape(kv, start=rank - 2)
    groups = op.Div(op.Shape(q, start=rank - 3, end=rank - 2), heads)
    spread = op.Expand(op.Unsqueeze(kv, op.Constant(value_ints=[rank - 2])),
                       op.Concat(outer, heads, groups, inner, axis=0))
    return op.Reshape(spread, op.Concat(outer, op.Shape(q, start=rank - 3, end=rank - 2), inner, axis=0))


def _causal_mask(q, k):
    """``ones(L, S).tril()`` as bool: query i sees keys 0..i."""
    length = op.Gather(op.Shape(q), op.Constant(value_ints=[-2]))
    source = op.Gather(op.Shape(k), op.Constant(value_ints=[-2]))
    rows = op.Unsqueeze(op.Range(op.Constant(value_int=0), op.Squeeze(length), op.Constant(value_int=1)),
                        op.Constant(value_ints=[1]))
    cols = op.Range(op.Constant(value_int=0), op.Squeeze(source), op.Constant(value_int=1))
    return op.GreaterOrEqual(rows, cols)


def _bias_and_visible(cx, mask, q):
    """(the additive bias, 1 for each query row that sees at least one key, else 0). A hidden key's
    bias is finite (``MASKED``): a hidden row then stays finite, and multiplying by 0 clears it (a
    NaN check inside the attention chain keeps OpenVINO from fusing it, and its ``Where`` after the
    chain fails to compile)."""
    if mask.dtype == ir.DataType.BOOL:
        keep, bias = mask, op.Where(mask, constant_like(cx, 0.0, q), constant_like(cx, MASKED, q))
    else:
        mask = mask if mask.dtype == q.dtype else op.CastLike(mask, q)
        keep, bias = op.Not(op.Equal(mask, constant_like(cx, float("-inf"), q))), op.Max(mask, constant_like(cx, MASKED, q))
    # max over 0 / 1, not over the mask: OpenVINO's ReduceMax of a row of -inf gives the lowest float
    return bias, op.ReduceMax(op.Cast(keep, to=q.dtype), op.Constant(value_ints=[-1]), keepdims=1)


@handles("aten::scaled_dot_product_attention.default", "aten::scaled_dot_product_attention")
def scaled_dot_product_attention(cx, node, args, kwargs):
    q, k, v, mask, dropout_p, is_causal = (list(args) + [None, 0.0, False])[:6]
    scale, gqa = kwargs.get("scale"), kwargs.get("enable_gqa", False)
    if dropout_p:
        raise NotImplementedError(f"scaled_dot_product_attention with dropout_p={dropout_p} (eager drops at "
                                  "random; the ONNX model would not). Trace in eval mode, or with dropout_p=0")
    rank = len(node.args[0].type.shape)
    if rank < 2 or len(node.args[1].type.shape) != rank:
        raise NotImplementedError("scaled_dot_product_attention with query and key of different ranks")
    if gqa:
        k, v = _repeat_heads(q, k, rank), _repeat_heads(q, v, rank)
    if is_causal:
        mask = _causal_mask(q, k)
    root = _scaled(cx, node, q, scale)
    key_t = op.Transpose(k, perm=[*range(rank - 2), rank - 1, rank - 2])
    scores = op.MatMul(op.Mul(q, root), op.Mul(key_t, root))
    if mask is None:
        return [op.MatMul(op.Softmax(scores, axis=-1), v)]
    bias, visible = _bias_and_visible(cx, mask, q)
    return [op.Mul(op.MatMul(op.Softmax(op.Add(scores, bias), axis=-1), v), visible)]
