"""ONNX for float math on traced sizes (trace/symfloat.py): ``h / 2``, ``h * 0.5``,
``math.ceil`` / ``floor`` / ``trunc``, ``round``, ``max`` / ``min`` of sizes.

Sizes are 0-d int64 tensors in the exported graph and Python floats 0-d doubles, so TF-style
same padding stays dynamic. Registered in special_ops' handler table.
"""
from __future__ import annotations

from ._deps import require
from .special_ops import HANDLERS, _scalar_dtype, _scalars, handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402


def _doubles(cx, node, args):
    out = []
    for a in args:
        if isinstance(a, ir.Value):
            out.append(a if a.dtype == ir.DataType.DOUBLE else op.Cast(a, to=ir.DataType.DOUBLE))
        else:
            out.append(cx.builder._get_or_create_constant(float(a), ir.DataType.DOUBLE))
    return out


@handles("aten::div.int", "aten::div.float")
def true_divide(cx, node, args, kwargs):
    a, b = _doubles(cx, node, args[:2])
    return [op.Div(a, b)]


@handles("aten::sub.int_float", "aten::sub.float_int")
def sub_mixed(cx, node, args, kwargs):
    a, b = _scalars(cx, node, args)
    return [op.Sub(a, b)]


@handles("aten::floordiv.float", "aten::floordiv.int_float", "aten::floordiv.float_int")
def floordiv_float(cx, node, args, kwargs):
    a, b = _doubles(cx, node, args[:2])
    return [op.Floor(op.Div(a, b))]


def _to_result(node, value):
    want = _scalar_dtype(node)
    return value if value.dtype == want else op.Cast(value, to=want)


def sym_math(cx, node, args, kwargs):
    fn = node.attrs["fn"]
    if fn in ("max", "min"):
        a, b = _scalars(cx, node, args)
        return [op.Max(a, b) if fn == "max" else op.Min(a, b)]
    (x,) = _doubles(cx, node, args)
    if fn == "ceil":
        r = op.Ceil(x)
    elif fn == "floor":
        r = op.Floor(x)
    elif fn == "round":
        r = op.Round(x)   # half to even, as Python's round
    else:   # trunc
        r = op.Mul(op.Sign(x), op.Floor(op.Abs(x)))
    return [_to_result(node, r)]


HANDLERS["tracejit::sym_math"] = sym_math
