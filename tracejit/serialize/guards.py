"""``tracejit::guard`` nodes in files: their attributes as data, checked on load.

A guard's ``expected`` and ``seen`` values are plain data (bools, ints, floats,
lists of them); ``what`` and ``line`` are texts that only ever reach error
messages. Everything else about a guard is in the op table (ir/ops.py).
"""
from __future__ import annotations

import functools
import math
import types

import torch

from ..errors import GuardError, LoadError, SaveError
from ..ir import GUARD_KINDS, GUARD_TESTS, Value, guard_arity
from ..ir.guard_nodes import is_flag_path
from ..support.guards import METADATA, PLAIN_VALUE_TESTS
from .constants import decode_const, encode_const
from ..patterns import LazyPattern

_TENSOR_TESTS = {"truth", "item", "int", "float", "tolist", "dim", "len", "equal", "dtype", "device"}
# tests that also read a traced Python number (``int(h * 0.5)``, trace/symfloat.py)
_NUMBER_TESTS = {"truth", "int", "float"}
_MAX_TEXT = 500
_MAX_GUARD_TEXT = 4000   # the text a call guard compares with (repr(tensor), trace/boundary.py)


def encode_attrs(node, where: str) -> dict:
    a = node.attrs
    out = {"kind": a["kind"], "test": a["test"], "expected": encode_const(a["expected"], where)}
    if a.get("seen") is not None:
        out["seen"] = encode_const(a["seen"], where)
    for key in ("what", "line"):
        if a.get(key):
            out[key] = str(a[key])[:_MAX_TEXT]
    if a.get("path"):   # a submodule's training flag (trace/module_flags.py)
        out["path"] = str(a["path"])
    if a.get("call"):
        if not file_may_call(a["call"]):
            where_line = f" (the read at {node.source})" if node.source is not None else ""
            raise SaveError(f"{where}: the program guards {a['call']!r}{where_line}, a read a file may not repeat "
                            "(only the reviewed reads of tensor metadata, comparisons and formatting: "
                            "serialize/guards.py); keep this program in memory, or compute the value with tensor "
                            "operations")
        out["call"] = a["call"]
    return out


_FLOAT_TEXTS = {"nan", "-nan", "-0.0", "0.0"}   # support/guards.plain_value: the floats == cannot compare


def _plain_value(v, at: str, depth: int = 0, test: str = ""):
    if depth > 8:
        raise LoadError(f"{at}: guard value nested too deeply")
    if isinstance(v, list):
        if len(v) > 1_000_000:
            raise LoadError(f"{at}: guard value too long")
        return [_plain_value(x, at, depth + 1, test) for x in v]
    if v is None or isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, str) and ((test == "call" and len(v) <= _MAX_GUARD_TEXT)
                               or (test in PLAIN_VALUE_TESTS and v in _FLOAT_TEXTS)):
        return v
    raise LoadError(f"{at}: a guard compares with numbers, bools or lists of them; found {type(v).__name__} "
                    "(a text only in a call guard, or as a NaN / signed zero)")


# The reads a file's call guard may make again. trace/boundary.py guards any read that hands Python a
# value; a file may repeat only these, reviewed: tensor metadata (support/guards.METADATA), comparisons
# that give a bool, and formatting. Each is read-only and bounded by its operands' sizes. Anything else
# (a method that writes, a private helper that trusts its arguments) is a LoadError: default-deny.
FILE_CALL_METHODS = frozenset(METADATA) | {"is_same_size", "equal", "allclose", "__contains__", "is_nonzero",
                                           "tolist", "numpy", "__array__", "__len__", "is_floating_point",
                                           "is_complex", "is_signed"}
FILE_CALL_FUNCTIONS = {"torch.allclose", "torch.equal", "torch.is_same_size", "torch.numel", "torch.is_nonzero",
                       "torch.result_type", "torch.can_cast", "torch.promote_types", "torch.is_tensor",
                       "torch.is_floating_point", "torch.is_complex"}
# Of those, the reads whose work is their operands' *broadcast*, not their sizes: ``allclose`` (isclose of the
# two) and ``a.__contains__(b)`` (``(b == a).any()``). Two legal tensors of a file, [2**16, 1] and [1, 2**16],
# made a guard's allclose ask for 2**32 elements (round 25). In a program with a call budget the guard is
# sized first, like an op of two tensors (serialize/budget_plan.BudgetPlan.check_for; codegen/guards.py).
BROADCASTING_CALLS = frozenset(("fn:torch.allclose", "method:allclose", "method:__contains__"))
# And the reads that print a tensor. torch elides only dimensions longer than 2 x edgeitems, so a view of one
# element expanded to [2] * 25 (2**25 elements, within the budget) printed all of them: 800 MB of text and minutes
# a call (round 25). Such a guard compares with a text of at most _MAX_GUARD_TEXT characters and each printed
# element takes one at least, so a loaded program checks the count first (BudgetPlan.check_for; codegen/guards.py).
TEXT_READS = frozenset(("builtin:repr", "builtin:str", "builtin:format"))


def printed_elements(t) -> int:
    """How many elements ``repr`` / ``str`` of tensor ``t`` prints under the print options now."""
    opts = torch._tensor_str.PRINT_OPTS
    if t.numel() <= opts.threshold:
        return t.numel()
    return math.prod(min(int(s), 2 * opts.edgeitems) for s in t.shape)


def text_read_check(call: str, where: str, most: int):
    """The check before a call guard ``call`` (TEXT_READS) that compares with a text of ``most`` characters: a
    GuardError, before any printing, when its tensor would print more elements than that (it cannot match)."""
    def check(bound: dict) -> None:
        t = bound.get("self")
        if isinstance(t, torch.Tensor):
            n = printed_elements(t)
            if n > most:
                raise GuardError(f"the call guard {call} at {where}: the tensor {list(t.shape)} would print {n} "
                                 f"elements, more than the {most} characters the guard compares with (not printed)")
    return check


_FORMAT_SPEC = LazyPattern(r"[^0-9]{0,8}(?:[0-9]{1,3}[^0-9]{0,8}){0,3}")   # widths and precisions below 1000


def file_may_call(call) -> bool:
    """Is ``call`` (a call guard's ``"kind:name"``) one of the reads a file may make again?"""
    if not isinstance(call, str):
        return False
    kind, _, name = call.partition(":")
    if kind == "builtin":
        return name in ("repr", "str", "format")
    if kind == "fn":
        return name in FILE_CALL_FUNCTIONS
    if kind in ("method", "attr"):
        fn = getattr(torch._C.TensorBase, name, None) if name.isidentifier() else None
        want = (types.MethodDescriptorType, types.WrapperDescriptorType) if kind == "method" \
            else (types.GetSetDescriptorType,)
        return name in FILE_CALL_METHODS and isinstance(fn, want)
    return False


def check_call_guard(node, at: str) -> None:
    """A "call" guard (trace/boundary.py) makes a read again: only the reviewed reads above may stand in a
    file, ``format``'s spec may not ask for a text of a million characters."""
    call = node.attrs.get("call")
    if not isinstance(call, str):
        raise LoadError(f"{at}: a call guard needs its call ('kind:name')")
    kind, _, name = call.partition(":")
    if not file_may_call(call):
        raise LoadError(f"{at}: a call guard may not call {call[:60]!r}: a file may repeat only the reviewed reads "
                        "of tensor metadata, comparisons and formatting (serialize/guards.py)")
    if kind in ("method", "attr", "builtin") and not (node.args and isinstance(node.args[0], Value)):
        raise LoadError(f"{at}: a call guard on {call[:60]!r} needs a traced value first")
    if name == "format" and not all(isinstance(a, str) and _FORMAT_SPEC.fullmatch(a) for a in node.args[1:]):
        raise LoadError(f"{at}: a format guard's spec must be a short format string")
    if any(v is not None for v in node.outputs):
        raise LoadError(f"{at}: a guard defines no values")


def check_guard(node, at: str) -> None:
    """Validate a decoded guard node and decode its values in place (called by validate.check_node)."""
    a = node.attrs
    if a.get("kind") not in GUARD_KINDS or guard_arity(a.get("test")) is None or (
            (a.get("kind") == "state") != (a.get("test") not in GUARD_TESTS)):
        raise LoadError(f"{at}: unknown guard kind {str(a.get('kind'))[:40]!r} or test {str(a.get('test'))[:40]!r}")
    if a.get("kind") == "global" or a.get("test") == "global":   # Python globals: in memory only (encode.py)
        raise LoadError(f"{at}: a file holds no guard on a Python global (tracejit.save never writes one)")
    unknown = set(a) - {"kind", "test", "expected", "seen", "what", "line", "call", "path"}
    if unknown:
        raise LoadError(f"{at}: unknown guard attributes {sorted(map(str, unknown))[:5]}")
    if "path" in a:
        if a["test"] != "training" or not is_flag_path(a["path"]):
            raise LoadError(f"{at}: a guard's submodule path must be module names joined by dots, on a training "
                            "guard")
    test = a["test"]
    n = guard_arity(test)
    if test == "call":
        check_call_guard(node, at)
    elif "call" in a:
        raise LoadError(f"{at}: only a 'call' guard names a call")
    elif len(node.args) != n or node.kwargs or any(v is not None for v in node.outputs):
        raise LoadError(f"{at}: guard test {test!r} takes {n} operand(s) and defines no values")
    for i, operand in enumerate(node.args if test != "call" else ()):
        is_tensor = isinstance(operand, Value) and hasattr(operand.type, "shape")
        is_number = isinstance(operand, Value) and getattr(operand.type, "kind", None) in ("int", "float")
        if test in _TENSOR_TESTS and not is_tensor and not (test in _NUMBER_TESTS and is_number):
            raise LoadError(f"{at}: guard test {test!r} needs a tensor operand")
        if test not in _TENSOR_TESTS and is_tensor:
            raise LoadError(f"{at}: guard test {test!r} compares sizes, not tensors")
        if not isinstance(operand, (Value, bool, int, float)):
            raise LoadError(f"{at}: a guard operand must be a value or a number")
    if a["kind"] == "state":   # a global-state read (ir/state_tests.py): a bool, number or name
        a["expected"] = _state_value(decode_const(a["expected"], at), at)
        a["seen"] = _state_value(decode_const(a.get("seen"), at), at)
    elif test in ("dtype", "device"):
        a["expected"] = _name_of(test, decode_const(a["expected"], at), at)
        a["seen"] = _name_of(test, decode_const(a.get("seen"), at), at)
    else:
        a["expected"] = _plain_value(decode_const(a["expected"], at), at, test=test)
        a["seen"] = _plain_value(decode_const(a.get("seen"), at), at, test=test)
    for key in ("what", "line"):
        if key in a and (not isinstance(a[key], str) or len(a[key]) > _MAX_TEXT):
            raise LoadError(f"{at}: guard {key} must be a text of at most {_MAX_TEXT} characters")


def _state_value(v, at: str):
    if v is None or isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 100):
        return v
    raise LoadError(f"{at}: a global-state guard compares with a bool, a number or a short name; "
                    f"found {type(v).__name__}")


@functools.cache
def _dtype_names() -> frozenset:
    """Every dtype's name (``torch.float32``); made on the first dtype guard (0.7 ms: a walk over torch's names)."""
    return frozenset(str(v) for v in vars(torch).values() if isinstance(v, torch.dtype))   # vars: no getattr per name


_DEVICE_NAME = LazyPattern(r"[a-z_]{1,20}(:[0-9]{1,4})?")


def _name_of(test: str, v, at: str):
    """A dtype guard compares with a dtype's name (``torch.float32``), a device guard with a device's (``cuda:0``)."""
    ok = v is None or (isinstance(v, str) and (v in _dtype_names() if test == "dtype" else bool(_DEVICE_NAME.fullmatch(v))))
    if not ok:
        raise LoadError(f"{at}: a {test} guard compares with a {test} name; found {str(v)[:40]!r}")
    return v
