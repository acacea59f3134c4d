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
"""
from __future__ import annotations

from ._deps import require
from .special_ops import handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402


def _like(cx, bound, x):
    """A clamp bound as a value of x's dtype (a Python number becomes a constant)."""
    if bound is None or isinstance(bound, ir.Value):
        return bound if bound is None or bound.dtype == x.dtype else op.CastLike(bound, x)
    return cx.builder._get_or_create_constant(bound, x.dtype)


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
    zero, one = (cx.builder._get_or_create_constant(c, x.dtype) for c in (0.0, 1.0))
    return [op.Sub(op.Min(x, zero), op.Log(op.Add(one, op.Exp(op.Neg(op.Abs(x))))))]


@handles("aten::sign.default")
def sign(cx, node, args, kwargs):
    x = args[0]
    if x.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        return [op.Sign(x)]
    return [op.Where(op.IsNaN(x), cx.builder._get_or_create_constant(0.0, x.dtype), op.Sign(x))]
