"""Type-check a loaded node's arguments against its ATen schema, and refuse unsafe ops.

The loader binds a node's arguments to the op's schema the way Python's argument
parser does (a trailing run of ints may stand for one ``int[]``), then checks every
argument's value: a Tensor where a Tensor is expected, ints within int64 (dims within
64; what an op's sizes allocate is its size rule's to bound: size_rules.py), floats where floats go (dropout's ``p``
in [0, 1]), enums and strings from known sets, no generator but one the program makes
(trace/rng_record.py), no pinning or non-strided
layout. Ops that touch files, raw storage or unchecked strides, or build sparse /
nested / quantized tensors whose invariants C++ does not check, are refused by name.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..errors import LoadError
from ..ir import Value
from ..ops import STRING_ARGUMENTS, takes_numbers_for_tensors
from .constants import device_constant

INT64 = 2 ** 63
MAX_DIMS = 64
MAX_LIST = 65536
MAX_STR = 256
# ATen ops a file may never name: files, raw storage and strides, unchecked invariants (sparse,
# nested, quantized, mkldnn), memory pinning and the like. Plain string tests, not a regular expression
# (compiling it was 0.4 ms of a server's start); DENIED_OP_RE below is the same rule as a pattern, which
# tests/security/test_denied_ops.py holds it to on every ATen op name and generated ones.
_DENIED_PARTS = ("unsafe", "sparse", "nested", "mkldnn", "quantiz", "storage", "from_file", "strided", "pin_memory",
                 "is_pinned", "csr", "csc", "bsr", "bsc", "coo", "record_stream", "data_ptr", "resize",
                 "_reshape_alias", "share_memory", "_copy_from", "_fw_primal", "_efficientzerotensor", "_foreach",
                 "_nnpack", "_cudnn", "miopen", "_propagate_xla", "_to_cpu")
_DENIED_STARTS = ("set_", "_set_", "_make_", "_fused", "_assert", "_print", "_debug", "_functional_assert", "_has_",
                  "_use_")
DENIED_OP_RE = (r"unsafe|sparse|nested|mkldnn|quantiz|storage|from_file|^(?!as_strided\Z)(?s:.*)strided|pin_memory|is_pinned|"
                r"csr|csc|bsr|bsc|coo|record_stream|data_ptr|resize|^_?set_|^set$|_reshape_alias|share_memory|"
                r"_copy_from|^_make_|_fw_primal|_efficientzerotensor|_foreach|^_fused|_nnpack|_cudnn|miopen|"
                r"^_assert|^_print|^_debug|^_functional_assert|_propagate_xla|_to_cpu|^_has_|^_use_")


def is_denied_op(name: str) -> bool:
    """Is ``aten::name`` refused in files whatever its arguments (``re.search(DENIED_OP_RE, name)``)? ``as_strided``
    itself is not: its size rule holds the view within its input (serialize/op_sizes_strided.py)."""
    if name == "as_strided":
        return False
    return (name.startswith(_DENIED_STARTS) or name in ("set", "set\n")   # "$" also matches before a final newline
            or any(part in name for part in _DENIED_PARTS))


DIM_NAMES = {"dim", "dim0", "dim1", "dim2", "dims", "start_dim", "end_dim", "source", "destination",
             "dimension", "axis", "axis0", "axis1", "dimname"}
SCALE_NAMES = {"scale_factors", "scale_factor", "scales", "scales_h", "scales_w", "scales_d"}
STRING_CHOICES = STRING_ARGUMENTS   # ops/overrides.py: the closed vocabularies of plain `str` arguments


NOT_DIMS = {("tile", "dims")}   # (op, argument) named like a dimension that holds something else: repetitions


def is_dim_arg(op: str, arg: str) -> bool:
    """Does argument ``arg`` of aten op ``op`` name tensor dimensions?"""
    return arg in DIM_NAMES and (op, arg) not in NOT_DIMS


def check_op_name(name: str, at: str) -> None:
    if is_denied_op(name):
        raise LoadError(f"{at}: aten::{name} is refused in files (it reaches raw storage, files, unchecked "
                        "strides or a tensor layout whose invariants are not checked)")


class Argument(NamedTuple):
    """What the checks read of one schema argument, as plain Python (reading torch's is a C++ call each time)."""
    name: str
    kwarg_only: bool
    type: str        # str(argument.type): "List[int]", "Optional[Tensor]", ...
    real_type: str   # str(argument.real_type)
    has_default: bool
    writes: bool = False   # annotated Tensor(a!): the op writes it (self of an in-place op, out= of an .out overload)


_arguments: dict = {}   # id(schema) -> (schema, its Arguments): the schema is held, so its id stays its own


def arguments(schema) -> tuple:
    """The Arguments of a FunctionSchema, read from torch once per schema and process (a load checks
    every node of every graph against one; torch hands out the same schema object for an overload)."""
    hit = _arguments.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    out = tuple(Argument(a.name, a.kwarg_only, str(a.type), str(a.real_type), a.has_default_value(),
                         a.alias_info is not None and a.alias_info.is_write) for a in schema.arguments)
    _arguments[id(schema)] = (schema, out)
    return out


def bind(schema, args, kwargs) -> dict | None:
    """{parameter name: value} as Python's argument parser would bind them, or None."""
    params = arguments(schema)
    out: dict = {}
    i = 0
    positional = [a for a in params if not a.kwarg_only]
    # ints as varargs (``x.view(2, 3)``, ``torch.zeros(2, 3)``) only for an int list that is the one positional
    # parameter besides ``self``, as torch's parser allows: ``avg_pool2d(x, 3, 2, 1)`` or ``conv2d(x, w, b, 1,
    # 20000)`` bind kernel / stride / padding one by one (as a list they hid the padding from the size rules)
    varargs = len([a for a in positional if a.name != "self"]) == 1
    for p in positional:
        if i >= len(args):
            break
        if varargs and p.type == "List[int]" and len(args) - i > 1 and all(_is_int(x) for x in args[i:]):
            out[p.name] = list(args[i:])
            i = len(args)
            break
        out[p.name] = args[i]
        i += 1
    if i < len(args):
        return None
    names = {a.name for a in params}
    for k, v in kwargs.items():
        if k not in names or k in out:
            return None
        out[k] = v
    for a in params:
        if a.name not in out and not a.has_default and not a.type.startswith("Optional["):
            return None
    return out


def numbers_allowed(op_name: str, target) -> bool:
    """Does the call (``target``: a CallTarget or None) take a Python number where the schema says Tensor?
    Python operators and indexing (``x[i] = 5.0``) do; other ops where the registry says so."""
    return (target is not None and target.kind in ("op", "index")) or takes_numbers_for_tensors(op_name.rstrip("_"))


def check_arguments(op_name: str, schema, node, at: str) -> dict:
    """Raise LoadError unless every argument of ``node`` fits ``schema``; return the arguments bound
    to the schema's names (the op's size rule, size_rules.py, then bounds what they allocate)."""
    bound = bind(schema, node.args, node.kwargs)
    numbers = numbers_allowed(op_name, node.target)
    if bound is None:
        raise LoadError(f"{at}: its arguments do not bind to the schema {_short(schema)}")
    types = {a.name: a.real_type for a in arguments(schema)}
    for name, value in bound.items():
        rt = types[name]
        if numbers and rt in ("Tensor", "Optional[Tensor]") and isinstance(value, (int, float, complex)):
            rt = "number"   # a Python number the binding wraps into a tensor
        if name == "unsafe" and value is not False:
            raise LoadError(f"{at}: unsafe=True skips the kernel's own checks; files may not ask for it")
        _check_value(value, rt, name, op_name, f"{at}, argument {name!r}")
    if op_name in VIEWS:
        _check_view(bound, at)
    return bound


VIEWS = {"view", "reshape"}


def _check_view(bound: dict, at: str) -> None:
    """view / reshape to constant sizes: the element count must match the traced input's."""
    x, sizes = bound.get("self"), bound.get("size", bound.get("shape"))
    if isinstance(sizes, int):
        sizes = [sizes]
    if not isinstance(sizes, (list, tuple)) or not isinstance(x, Value) or not hasattr(x.type, "shape"):
        return
    if sum(1 for s in sizes if s == -1) > 1 or any(isinstance(s, int) and s < -1 for s in sizes):
        raise LoadError(f"{at}: impossible view sizes {list(sizes)[:8]} (at most one -1, no other negative size)")
    if any(not isinstance(s, int) for s in sizes):
        return   # sizes traced from the input: checked when the program runs
    numel = math.prod(x.type.shape)
    known = math.prod(s for s in sizes if s != -1)
    fits = numel == known if -1 not in sizes else (known != 0 and numel % known == 0) or numel == 0
    if not fits:
        raise LoadError(f"{at}: cannot view a tensor of shape {list(x.type.shape)} ({numel} elements) as "
                        f"{list(sizes)[:8]}")


_READ_KINDS = {"dtype": "ScalarType", "device": "Device", "generator": "Generator"}   # generator: rng_record.py


def _check_value(v, rt: str, name: str, op: str, at: str) -> None:
    if rt.startswith("Optional["):
        if v is None:
            return
        rt = rt[9:-1]
    if isinstance(v, Value):
        kind = getattr(v.type, "kind", None)
        if kind in _READ_KINDS:   # a dtype / device read from a tensor at call time (trace/provenance.py)
            if rt == _READ_KINDS[kind]:
                return
            raise LoadError(f"{at}: a traced {kind} where the schema expects {rt}")
        if rt in ("Tensor", "int", "float", "number", "bool", "complex", "List[int]"):
            return
        raise LoadError(f"{at}: a traced value where the schema expects {rt}")
    if rt == "Tensor":
        raise LoadError(f"{at}: expected a Tensor, found the constant {_show(v)}")
    if rt == "int":
        _int(v, at)
        if is_dim_arg(op, name) and not -MAX_DIMS <= v < MAX_DIMS:
            raise LoadError(f"{at}: dimension {v} is out of range (tensors have at most {MAX_DIMS} dimensions)")
        return
    if rt == "List[int]":
        items = [v] if _is_int(v) else v
        if not isinstance(items, (list, tuple)) or len(items) > MAX_LIST:
            raise LoadError(f"{at}: expected a list of ints, found {_show(v)}")
        for x in items:
            if isinstance(x, Value):
                continue
            _int(x, at)
            if is_dim_arg(op, name) and not -MAX_DIMS <= x < MAX_DIMS:
                raise LoadError(f"{at}: dimension {x} is out of range")
        return
    if rt in ("float", "complex", "number"):
        ok = (int, float) if rt == "float" else (int, float, complex, bool) if rt == "number" else (int, float, complex)
        if not isinstance(v, ok) or (rt != "number" and isinstance(v, bool)):
            raise LoadError(f"{at}: expected a {rt}, found {_show(v)}")
        if isinstance(v, int) and not -INT64 <= v < INT64:
            raise LoadError(f"{at}: {v} does not fit in 64 bits")
        if name == "p" and "dropout" in op and not (0.0 <= v <= 1.0):
            raise LoadError(f"{at}: a dropout probability must lie in [0, 1], found {v}")
        if name in SCALE_NAMES and isinstance(v, (int, float)):
            if not 0 <= v <= INT64:
                raise LoadError(f"{at}: scale factor {v} is out of range")
        return
    if rt == "bool":
        if not isinstance(v, bool):
            raise LoadError(f"{at}: expected a bool, found {_show(v)}")
        if name == "pin_memory" and v:
            raise LoadError(f"{at}: pinned memory is refused in files")
        return
    if rt == "str":
        if not isinstance(v, str) or len(v) > MAX_STR or not v.isascii() or not v.isprintable():
            raise LoadError(f"{at}: expected a short printable ASCII string, found {_show(v)}")
        if name in STRING_CHOICES and v not in STRING_CHOICES[name]:
            raise LoadError(f"{at}: {v!r} is not one of {sorted(STRING_CHOICES[name])}")
        return
    if rt == "ScalarType":
        if not isinstance(v, torch.dtype):
            raise LoadError(f"{at}: expected a dtype, found {_show(v)}")
        return
    if rt == "Layout":
        if v is not torch.strided:
            raise LoadError(f"{at}: only the strided layout is allowed in files, found {_show(v)}")
        return
    if rt == "MemoryFormat":
        if not isinstance(v, torch.memory_format):
            raise LoadError(f"{at}: expected a memory format, found {_show(v)}")
        return
    if rt == "Device":
        if isinstance(v, str) and len(v) <= 32:
            try:
                v = torch.device(v)
            except RuntimeError:
                raise LoadError(f"{at}: expected a device, found {_show(v)}") from None
        if isinstance(v, torch.device):
            device_constant(str(v), at)   # a device type tracejit traces on (constants.py)
        elif not (_is_int(v) and 0 <= v < 1024):
            raise LoadError(f"{at}: expected a device, found {_show(v)}")
        return
    if rt in ("List[Tensor]", "List[Optional[Tensor]]"):
        if not isinstance(v, (list, tuple)) or len(v) > MAX_LIST or not all(
                (isinstance(x, Value) and hasattr(x.type, "shape")) or (x is None and "Optional" in rt) for x in v):
            raise LoadError(f"{at}: expected a list of tensors, found {_show(v)}")
        return
    if rt in ("List[float]", "List[bool]", "List[complex]"):
        elem = rt[5:-1]
        if not isinstance(v, (list, tuple)) or len(v) > MAX_LIST:
            raise LoadError(f"{at}: expected a list of {elem}, found {_show(v)}")
        for x in v:
            if not isinstance(x, Value):
                _check_value(x, elem, name, op, at)
        return
    if rt in ("List[t]", "t"):   # aten::tensor's data: nested lists of numbers
        if _count_numbers(v, 0, at) > MAX_LIST:
            raise LoadError(f"{at}: more than {MAX_LIST} numbers of tensor data")
        return
    raise LoadError(f"{at}: arguments of type {rt} are not accepted in files (found {_show(v)})")


def _count_numbers(v, depth: int, at: str) -> int:
    """Numbers in nested lists of data, refusing anything else."""
    if isinstance(v, (bool, int, float, complex)) and not (isinstance(v, int) and not -INT64 <= v < INT64):
        return 1
    if isinstance(v, Value) and getattr(v.type, "kind", None) in ("int", "float", "bool"):
        return 1   # a traced size (``torch.tensor([x.size(0), ...])``): a number at run time
    if isinstance(v, (list, tuple)) and depth < MAX_DIMS:
        return sum(_count_numbers(x, depth + 1, at) for x in v)
    raise LoadError(f"{at}: tensor data holds {_show(v)}")


def _is_int(x) -> bool:
    return (isinstance(x, int) and not isinstance(x, bool)) or (
        isinstance(x, Value) and getattr(x.type, "kind", None) == "int")


def _int(v, at: str) -> None:
    if not isinstance(v, int) or isinstance(v, bool):
        raise LoadError(f"{at}: expected an int, found {_show(v)}")
    if not -INT64 <= v < INT64:
        raise LoadError(f"{at}: {v} does not fit in 64 bits")


def _show(v) -> str:
    return f"{type(v).__name__} {str(v)[:40]!r}"


def _short(schema) -> str:
    return str(schema)[:200]
