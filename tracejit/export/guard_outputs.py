"""Guards the exported model checks itself: ``export_onnx(..., guard_outputs=True)``.

A guard ONNX cannot check from input sizes (the size of a tensor whose shape depends on the data, a value
read in Python: ``int(x.sum()) > 0``) becomes an extra boolean output of the model, ``tracejit_guard_<k>``,
computed in the graph from the values the guard reads (an intermediate's size through Shape / Gather, the
tensor's value, the size math between them), True when the guard holds. The model's metadata
(``tracejit.guard_outputs``) names each such output with the guard's source line and what it required. A
caller of such a file must check these outputs: where one is False, the other outputs are the traced
branch's answer, not the program's (docs/DEPLOY.md). The onnxruntime / OpenVINO backends check them after
each run (backends/guard_outputs.py).

Default-deny: a guard test without a form here (``tolist``, ``equal``, a call guard, ...) refuses the export.
"""
from __future__ import annotations

import math

import numpy as np

from ._deps import require
from .errors import ExportError
from .guards import is_layout_guard
from .strided import layout_holds

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

OUTPUT_PREFIX = "tracejit_guard_"
METADATA_KEY = "tracejit.guard_outputs"
_COMPARE = {"eq": op.Equal, "lt": op.Less, "le": op.LessOrEqual, "gt": op.Greater, "ge": op.GreaterOrEqual}
_TESTS = ("eq", "ne", "lt", "le", "gt", "ge", "truth", "int", "float", "item", "len")


def describe(node) -> str:
    """What a guard required and where: ``<what> (<source line>)``."""
    return f"{node.attrs.get('what') or node.attrs.get('test')} ({node.source or node.attrs.get('line') or 'unknown line'})"


def check_supported(node) -> None:
    """ExportError unless ``node`` (a guard) has an ONNX form here."""
    test = node.attrs.get("test")
    if is_layout_guard(node):
        return
    if test not in _TESTS or node.kwargs:
        raise ExportError(f"the trace relied on {describe(node)} (guard test {test!r}), which has no ONNX form as a "
                          "guard output", "tracejit::guard", node.source or node.attrs.get("line"))


def lower_guard(lowering, node):
    """The 0-d boolean ONNX value that is True where guard ``node`` holds, from the lowered values it reads."""
    test, expected = node.attrs["test"], node.attrs.get("expected")
    check_supported(node)
    if is_layout_guard(node):   # x.stride(): the traced layout's strides at the call's sizes (strided.py)
        return layout_holds(lowering, node)
    if test == "len":   # len(x) == expected: the first dimension's size
        first = op.Gather(op.Shape(lowering.arg(node.args[0]), start=0, end=1), _const(lowering, 0, ir.DataType.INT64))
        holds = op.Equal(first, _const(lowering, int(expected), ir.DataType.INT64))
    elif test in ("truth", "int", "float", "item"):
        holds = _value_test(lowering, test, _scalar_of(lowering.arg(node.args[0])), expected)
    else:
        a, b = (_operand(lowering, x) for x in node.args)
        a, b = _common(a, b)
        holds = op.Not(op.Equal(a, b)) if test == "ne" else _COMPARE[test](a, b)
        if expected is False:
            holds = op.Not(holds)
    return holds


def _value_test(lowering, test: str, x, expected):
    """``bool(x) is expected``, ``int(x) == expected``, ``float(x) == expected``, ``x.item() == expected``."""
    if isinstance(expected, str) and expected in ("0.0", "-0.0"):   # a zero as support/guards.plain_value gives it
        return _signed_zero(lowering, x, negative=expected.startswith("-"))
    if not isinstance(expected, (bool, int, float)):   # a NaN's sign ("nan" / "-nan"), a list, an object: no form
        raise ExportError(f"a guard expects {expected!r}, which has no ONNX form as a guard output")
    if test == "truth" or isinstance(expected, bool):
        b = op.Cast(x, to=ir.DataType.BOOL)   # nonzero (and NaN) is True, as Python's bool
        return b if (expected if test == "truth" else expected) else op.Not(b)
    if isinstance(expected, float) and math.isnan(expected):
        return op.IsNaN(op.Cast(x, to=ir.DataType.DOUBLE))
    if test == "int" or isinstance(expected, int):
        if x.dtype in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
            if test == "int":   # int() truncates toward zero
                x = op.Mul(op.Sign(x), op.Floor(op.Abs(x)))
            else:   # item() of a float tensor is a float: compared as one
                return op.Equal(op.Cast(x, to=ir.DataType.DOUBLE), _const(lowering, float(expected), ir.DataType.DOUBLE))
        return op.Equal(op.Cast(x, to=ir.DataType.INT64), _const(lowering, int(expected), ir.DataType.INT64))
    return op.Equal(op.Cast(x, to=ir.DataType.DOUBLE), _const(lowering, float(expected), ir.DataType.DOUBLE))


def _signed_zero(lowering, x, negative: bool):
    """``x == 0`` with the sign Python's reads tell apart: ``1 / x`` is -inf for -0.0, +inf for 0.0."""
    x = op.Cast(x, to=ir.DataType.DOUBLE)
    zero = _const(lowering, 0.0, ir.DataType.DOUBLE)
    below = op.Less(op.Div(_const(lowering, 1.0, ir.DataType.DOUBLE), x), zero)
    return op.And(op.Equal(x, zero), below if negative else op.Not(below))


def _scalar_of(value):
    """A one-element tensor as a 0-d one (Python's reads need exactly one element, as the trace had)."""
    return op.Reshape(value, op.Constant(value=ir.tensor(np.zeros(0, dtype=np.int64))))


def _operand(lowering, x):
    if hasattr(x, "producer") and hasattr(x, "type"):   # a traced Value
        v = lowering.arg(x)
        return _scalar_of(v) if isinstance(v, ir.Value) else v
    if isinstance(x, bool):
        return _const(lowering, int(x), ir.DataType.INT64)
    if isinstance(x, int):
        return _const(lowering, x, ir.DataType.INT64)
    if isinstance(x, float):
        return _const(lowering, x, ir.DataType.DOUBLE)
    raise ExportError(f"a guard compares with {type(x).__name__} {x!r}, which has no ONNX form as a guard output")


def _common(a, b):
    """Both operands in one dtype: int64 where both are integers, else double."""
    ints = (ir.DataType.INT64, ir.DataType.INT32, ir.DataType.BOOL)
    want = ir.DataType.INT64 if a.dtype in ints and b.dtype in ints else ir.DataType.DOUBLE
    return [v if v.dtype == want else op.Cast(v, to=want) for v in (a, b)]


def _const(lowering, value, dtype):
    return lowering.builder._get_or_create_constant(value, dtype)


def add_outputs(builder, values: list, guards: list) -> str:
    """Add each guard's boolean as output ``tracejit_guard_<k>``; returns the model's metadata text naming them."""
    for k, value in enumerate(values):
        builder.add_output(op.Identity(value), f"{OUTPUT_PREFIX}{k}")
    return "\n".join(f"{OUTPUT_PREFIX}{k}: {describe(g)}" for k, g in enumerate(guards))

