"""ONNX for ops whose torch_lib conversion gives another answer than eager on edge values.

Each was found by running the exported model in onnxruntime and OpenVINO beside eager:

- ``clamp`` / ``clip`` / ``clamp_min`` / ``clamp_max`` with one bound: torch_lib writes ``Clip`` with
  the other bound missing, and both runtimes then clamp ``inf`` to the dtype's largest finite value
  (eager: ``inf.clamp(min=0) == inf``); onnxruntime's ``Clip`` also refuses a bound that is not a
  scalar. One bound is a ``Max`` / ``Min`` here, which keep infinities (and, in onnxruntime, NaN).
- ``log_sigmoid``: torch_lib's ``Log(Sigmoid(x))`` underflows, onnxruntime's approximate sigmoid
  already at x = -15 (-14.84 for eager's -15, -inf from x = -20), both runtimes at x = -88. Here it is
  ``min(x, 0) - log(1 + exp(-|x|))``, eager's own formula, exact for every x.
- ``sign`` of NaN: eager gives 0, ONNX's ``Sign`` NaN.
- ``mean`` over an empty dimension (a dynamic axis that is 0 in a call): eager gives NaN (0 / 0), ONNX's
  ``ReduceMean`` 0, and onnxruntime drops the kept dimension of ``keepdim=True``. Where the graph does
  not know the reduced sizes, the mean is ``ReduceSum / count``; known non-zero sizes keep ``ReduceMean``.
- ``atan2``: torch_lib's maps every NaN (also inf / inf) to 0 and treats -0.0 as +0.0.
"""
from __future__ import annotations

from ._deps import require
from .special_ops import constant_like, handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402


def _like(cx, bound, x):
    """A clamp bound as a value of x's dtype (a Python number becomes a constant)."""
    if bound is None or isinstance(bound, ir.Value):
        return bound if bound is None or bound.dtype == x.dtype else op.CastLike(bound, x)
    return constant_like(cx, bound, x)


@handles("aten::clamp.default", "aten::clamp.Tensor", "aten::clip.default", "aten::clip.Tensor")
def clamp(cx, node, args, kwargs):
    x, lo, hi = (list(args) + [None, None])[:3]
    lo, hi = kwargs.get("min", lo), kwargs.get("max", hi)
    lo, hi = _like(cx, lo, x), _like(cx, hi, x)
    if lo is None and hi is None:
        return [op.Identity(x)]
    if lo is not None and hi is not None and _scalar(lo) and _scalar(hi):
        return [op.Clip(x, lo, hi)]   # both bounds: Clip keeps inf / NaN as eager (and min > max gives max)
    out = x if lo is None else op.Max(x, lo)
    return [out if hi is None else op.Min(out, hi)]   # eager's order: min first, then max wins


@handles("aten::clamp_min.default", "aten::clamp_min.Tensor")
def clamp_min(cx, node, args, kwargs):
    return [op.Max(args[0], _like(cx, args[1], args[0]))]


@handles("aten::clamp_max.default", "aten::clamp_max.Tensor")
def clamp_max(cx, node, args, kwargs):
    return [op.Min(args[0], _like(cx, args[1], args[0]))]


def _scalar(v) -> bool:
    return v.shape is not None and len(v.shape) == 0


@handles("aten::log_sigmoid.default")
def log_sigmoid(cx, node, args, kwargs):
    x = args[0]
    zero, one = (constant_like(cx, c, x) for c in (0.0, 1.0))
    return [op.Sub(op.Min(x, zero), op.Log(op.Add(one, op.Exp(op.Neg(op.Abs(x))))))]


@handles("aten::sign.default", "aten::sgn.default")
def sign(cx, node, args, kwargs):
    x = args[0]
    if x.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        return [op.Sign(x)]
    return [op.Where(op.IsNaN(x), constant_like(cx, 0.0, x), op.Sign(x))]


@handles("aten::mean.default", "aten::mean.dim")
def mean(cx, node, args, kwargs):
    x = args[0]
    rank = len(node.args[0].type.shape)
    if node.op.endswith(".dim"):
        dims, keepdim = (list(args) + [None, False])[1:3]
        dtype = kwargs.get("dtype", args[3] if len(args) > 3 else None)
    else:
        dims, keepdim, dtype = None, False, kwargs.get("dtype", args[1] if len(args) > 1 else None)
    if dtype is not None and dtype != -1:
        x = op.Cast(x, to=dtype)
    if rank == 0:
        return [op.Identity(x)]
    dims = reduced_dims(dims, rank, "mean")
    axes = op.Constant(value_ints=dims)
    keep = 1 if keepdim else 0
    shape = x.shape
    if shape is not None and len(shape) == rank and all(isinstance(shape[d], int) and shape[d] > 0 for d in dims):
        return [op.ReduceMean(x, axes, keepdims=keep)]   # sizes known and non-zero: no empty case
    return [op.Div(op.ReduceSum(x, axes, keepdims=keep), element_count(x, axes))]


def reduced_dims(dims, rank: int, what: str) -> list:
    """The sorted non-negative dims a reduction over ``dims`` (an int, a list, or None / [] for all)
    covers in a tensor of ``rank``."""
    dims = [dims] if isinstance(dims, int) else list(range(rank)) if dims is None or list(dims) == [] else list(dims)
    if not all(isinstance(d, int) for d in dims):
        raise NotImplementedError(f"{what} over dimensions given by traced values")
    return sorted(d % rank for d in dims) if rank else []


def element_count(x, axes):
    """How many elements of ``x`` a reduction over ``axes`` (an ONNX int64 tensor) covers, as x's dtype,
    read from the shape at run time (a dynamic axis may be 0)."""
    return op.CastLike(op.ReduceProd(op.Gather(op.Shape(x), axes), keepdims=0), x)


@handles("aten::atan2.default")
def atan2(cx, node, args, kwargs):
    """``atan2(y, x)`` exact on signed zeros, infinities and NaN (torch_lib's maps every NaN to 0 and
    reads -0.0 as +0.0): the angle of ``(|x|, |y|)`` in the first quadrant, reflected for a negative
    x (``x < 0`` or ``1 / x < 0``: -0.0 too), signed as y."""
    y, x = args[0], args[1]
    c = lambda v: constant_like(cx, v, y)   # noqa: E731
    ay, ax = op.Abs(y), op.Abs(x)
    angle = op.Atan(op.Div(ay, ax))
    angle = op.Where(op.And(op.Equal(ay, c(0.0)), op.Equal(ax, c(0.0))), c(0.0), angle)   # 0 / 0
    both_inf = op.And(op.IsInf(ay), op.IsInf(ax))
    angle = op.Where(both_inf, c(0.7853981633974483), angle)   # inf / inf: pi / 4
    negative = lambda v: op.Or(op.Less(v, c(0.0)), op.Less(op.Div(c(1.0), v), c(0.0)))   # noqa: E731
    angle = op.Where(negative(x), op.Sub(c(3.141592653589793), angle), angle)
    # the sign as a factor: onnxruntime's Where drops the sign of a -0.0 it selects
    return [op.Mul(angle, op.Where(negative(y), c(-1.0), c(1.0)))]
