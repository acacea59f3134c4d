"""``tracejit::guard`` nodes in files: their attributes as data, checked on load.

A guard's ``expected`` and ``seen`` values are plain data (bools, ints, floats,
lists of them); ``what`` and ``line`` are texts that only ever reach error
messages. Everything else about a guard is in the op table (ir/ops.py).
"""
from __future__ import annotations

import re

import torch

from ..errors import LoadError
from ..ir import GUARD_KINDS, GUARD_TESTS, Value, guard_arity
from . import encode   # encode imports validate, which imports this module: names are read at call time

_TENSOR_TESTS = {"truth", "item", "int", "float", "tolist", "dim", "len", "equal", "dtype", "device"}
# tests that also read a traced Python number (``int(h * 0.5)``, trace/symfloat.py)
_NUMBER_TESTS = {"truth", "int", "float"}
_MAX_TEXT = 500


def encode_attrs(node, where: str) -> dict:
    a = node.attrs
    out = {"kind": a["kind"], "test": a["test"], "expected": encode.encode_const(a["expected"], where)}
    if a.get("seen") is not None:
        out["seen"] = encode.encode_const(a["seen"], where)
    for key in ("what", "line"):
        if a.get(key):
            out[key] = str(a[key])[:_MAX_TEXT]
    return out


def _plain_value(v, at: str, depth: int = 0):
    if depth > 8:
        raise LoadError(f"{at}: guard value nested too deeply")
    if isinstance(v, list):
        if len(v) > 1_000_000:
            raise LoadError(f"{at}: guard value too long")
        return [_plain_value(x, at, depth + 1) for x in v]
    if v is None or isinstance(v, (bool, int, float)):
        return v
    raise LoadError(f"{at}: a guard compares with numbers, bools or lists of them; found {type(v).__name__}")


def check_guard(node, at: str) -> None:
    """Validate a decoded guard node and decode its values in place (called by validate.check_node)."""
    a = node.attrs
    if a.get("kind") not in GUARD_KINDS or guard_arity(a.get("test")) is None or (
            (a.get("kind") == "state") != (a.get("test") not in GUARD_TESTS)):
        raise LoadError(f"{at}: unknown guard kind {str(a.get('kind'))[:40]!r} or test {str(a.get('test'))[:40]!r}")
    unknown = set(a) - {"kind", "test", "expected", "seen", "what", "line"}
    if unknown:
        raise LoadError(f"{at}: unknown guard attributes {sorted(map(str, unknown))[:5]}")
    test = a["test"]
    n = guard_arity(test)
    if len(node.args) != n or node.kwargs or any(v is not None for v in node.outputs):
        raise LoadError(f"{at}: guard test {test!r} takes {n} operand(s) and defines no values")
    for i, operand in enumerate(node.args):
        is_tensor = isinstance(operand, Value) and hasattr(operand.type, "shape")
        is_number = isinstance(operand, Value) and getattr(operand.type, "kind", None) in ("int", "float")
        if test in _TENSOR_TESTS and not is_tensor and not (test in _NUMBER_TESTS and is_number):
            raise LoadError(f"{at}: guard test {test!r} needs a tensor operand")
        if test not in _TENSOR_TESTS and is_tensor:
            raise LoadError(f"{at}: guard test {test!r} compares sizes, not tensors")
        if not isinstance(operand, (Value, bool, int, float)):
            raise LoadError(f"{at}: a guard operand must be a value or a number")
    if a["kind"] == "state":   # a global-state read (ir/state_tests.py): a bool, number or name
        a["expected"] = _state_value(encode.decode_const(a["expected"], at), at)
        a["seen"] = _state_value(encode.decode_const(a.get("seen"), at), at)
    elif test in ("dtype", "device"):
        a["expected"] = _name_of(test, encode.decode_const(a["expected"], at), at)
        a["seen"] = _name_of(test, encode.decode_const(a.get("seen"), at), at)
    else:
        a["expected"] = _plain_value(encode.decode_const(a["expected"], at), at)
        a["seen"] = _plain_value(encode.decode_const(a.get("seen"), at), at)
    for key in ("what", "line"):
        if key in a and (not isinstance(a[key], str) or len(a[key]) > _MAX_TEXT):
            raise LoadError(f"{at}: guard {key} must be a text of at most {_MAX_TEXT} characters")


def _state_value(v, at: str):
    if v is None or isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 100):
        return v
    raise LoadError(f"{at}: a global-state guard compares with a bool, a number or a short name; "
                    f"found {type(v).__name__}")


_DTYPE_NAMES = {str(getattr(torch, n)) for n in dir(torch) if isinstance(getattr(torch, n, None), torch.dtype)}
_DEVICE_NAME = re.compile(r"[a-z_]{1,20}(:[0-9]{1,4})?")


def _name_of(test: str, v, at: str):
    """A dtype guard compares with a dtype's name (``torch.float32``), a device guard with a device's (``cuda:0``)."""
    ok = v is None or (isinstance(v, str) and (v in _DTYPE_NAMES if test == "dtype" else bool(_DEVICE_NAME.fullmatch(v))))
    if not ok:
        raise LoadError(f"{at}: a {test} guard compares with a {test} name; found {str(v)[:40]!r}")
    return v
