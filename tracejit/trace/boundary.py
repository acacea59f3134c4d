"""The boundary rule: a tensor fact that leaves the recorded world as a plain Python value is guarded.

Every torch function, Tensor method or property the recorder observes (trace/recorder.py) and
that returns something other than a tensor (a bool, int, float, str, tuple of ints, ``None`` or
an object) ends here, unless it is

- derived symbolically: sizes (``x.size()``, ``x.shape``, ``numel``: TracedInts, reads.py);
- read by a rule of its own that guards it: values (``item()``, ``bool(t)``, ``tolist()``,
  ``torch.equal``: reads.value_read), ranks (``dim()``), dtype / device facts (dtype_reads.py);
- on ``EXCEPTIONS`` below: the one reviewed list of reads that need no guard, each with its reason
  (tests/guards/test_boundary_rule.py shows each reason holds).

Everything else gets a ``call`` guard: at call time the generated code makes the same call on
the same operands (``x.is_contiguous()``, ``torch.allclose(a, b, rtol=...)``, ``x.nbytes``,
``repr(x)``) and compares the result, made plain by ``plain_value``, with the one the trace saw.
New torch functions are guarded this way without anyone editing a list. A read that cannot be
made again at call time (a memory address, a storage handle, a DLPack capsule) in user code is
refused at trace time with ``BoundaryError`` naming the line.
"""
from __future__ import annotations

import sys

import types

import torch

from ..errors import TraceError
from ..ir import Value
from ..pytree import flatten
# what a call-time guard compares and the call-time input check, shared with codegen and the loader (re-exported)
from ..support.guards import (INPUT_TYPES, METADATA, PLAIN_VALUE_TESTS, check_input_kind,  # noqa: F401
                                    needs_plain, plain_value, tensor_kind)
from .ops import _NAMESPACES
from .source import _TORCH_DIR, _TRACEJIT_DIR, in_torch, read_by_torch, source_text, user_location

# name -> why the value it returns needs no guard. Keep this list short: every entry is reviewed
# and tested (tests/guards/test_boundary_rule.py::test_each_exception_holds).
EXCEPTIONS = {
    "__hash__": "a tensor hashes by identity (id), never by value: the same fact as `is`, which the recorder "
                "cannot see either; a dict keyed by tensors is Python state (docs/CAPTURE.md)",
    "__reduce_ex__": "pickling / copying support: returns the tensor's own reconstruction recipe, no fact "
                     "the traced computation branches on",
    "__deepcopy__": "returns a tensor (copy.deepcopy), not a Python value",
    "__setstate__": "unpickling: writes the tensor, returns None",
    "__array_wrap__": "numpy's protocol for wrapping a ufunc's result back into a tensor: returns a tensor",
    "__array_priority__": "a class constant (1000) numpy reads to choose whose operator runs",
    "__reversed__": "returns a tensor (flip)",
    "__dlpack_device__": "the device as (type, index): the call-time signature check already fixes the device "
                        "type of every input",
    "dim": "guarded as the tensor's rank (reads.py: rank guard) where the tensor's shape depends on inputs",
    "ndimension": "the same as dim()",
    "dtype": "stays relative or is guarded where Python uses it (dtype_reads.py)",
    "device": "stays relative or is guarded where Python uses it (dtype_reads.py)",
    "is_floating_point": "a fact of the dtype: guarded through the dtype guard (dtype_reads.py)",
    "is_complex": "a fact of the dtype: guarded through the dtype guard (dtype_reads.py)",
    "is_signed": "a fact of the dtype: guarded through the dtype guard (dtype_reads.py)",
    "element_size": "a fact of the dtype: guarded through the dtype guard (dtype_reads.py)",
    "itemsize": "a fact of the dtype: guarded through the dtype guard (dtype_reads.py)",
    "get_device": "a fact of the device: guarded through the device guard (dtype_reads.py)",
    "is_cuda": "a fact of the device: guarded through the device guard (dtype_reads.py)",
    "is_cpu": "a fact of the device: guarded through the device guard (dtype_reads.py)",
    "is_meta": "a fact of the device: guarded through the device guard (dtype_reads.py)",
}

# reads whose answer cannot be asked again at call time: refused in user code
REFUSED = {
    "data_ptr": "a memory address: it differs for every new tensor, so a guard on it could never pass",
    "untyped_storage": "a storage handle: reads through it (its bytes, its address) are invisible to the tracer",
    "storage": "a storage handle: reads through it (its bytes, its address) are invisible to the tracer",
    "_storage": "a storage handle: reads through it are invisible to the tracer",
    "__dlpack__": "a DLPack capsule hands the tensor's memory to another library: what it computes is not recorded",
    "_cdata": "a C pointer: it differs for every new tensor",
}

# reads of a tensor's metadata (no data, so no device sync): kept by guards="shapes"

# the Python formatting entry points: guarded on the text they give (``repr(x)`` at call time)
FORMATTING = {"__repr__": "builtin:repr", "__str__": "builtin:str", "__format__": "builtin:format"}

_MAX_TEXT = 4000


class BoundaryError(TraceError):
    """A traced value left the recorded world in a way no call-time guard can check (refused at trace time)."""


def holds_tensor(result) -> bool:
    if isinstance(result, torch.Tensor):
        return True
    if isinstance(result, (tuple, list)):
        return any(holds_tensor(r) for r in result)
    return False


def call_form(func, name: str) -> str | None:
    """How to make the call again at call time (``method:stride``, ``fn:torch.allclose``), or None."""
    if name in FORMATTING:
        return FORMATTING[name]
    if isinstance(func, (types.MethodDescriptorType, types.WrapperDescriptorType)) \
            and getattr(torch._C.TensorBase, name, None) is func:
        return f"method:{name}"
    if isinstance(func, types.BuiltinFunctionType):
        owner = getattr(func, "__self__", None)
        path = _NAMESPACES.get(id(owner))
        if path is None and getattr(torch, name, None) is func:
            path = "torch"
        if path is not None:
            return f"fn:{path}.{name}"
    return None


def on_result(tracer, func, name: str, args, kwargs, result, form: str | None = None, depth: int = 3) -> None:
    """A call returned ``result``, a non-tensor: guard it, or refuse it, or (EXCEPTIONS) let it be."""
    if result is None and name not in ("grad_fn", "_base", "names"):
        return
    if name in EXCEPTIONS or tracer.frames == []:
        return
    loc = user_location(depth)
    by_user = not read_by_torch(2) and (loc is None or not in_torch(loc))
    if name in REFUSED:
        if by_user:
            raise BoundaryError(f"{_called(name)} at {loc} ({_line(loc)}): {REFUSED[name]}. tracejit cannot "
                                "guard it, so it refuses to freeze it: compute with tensor operations instead")
        tracer.unguarded_reads.append(name)   # read by torch: refused if it reaches the user (recorder.py)
        return
    form = form or call_form(func, name)
    if form is not None and form.startswith("attr:") and not isinstance(getattr(torch._C.TensorBase, name, None),
                                                                        types.GetSetDescriptorType):
        form = None   # a Python-level property: nothing generated code may be trusted to call again
    operands, kw = _operands(tracer, args, kwargs)
    if form is None or operands is None:
        what = f"{_called(name)} returned a Python value ({type(result).__name__})"
        if by_user:
            raise BoundaryError(f"{what} at {loc} ({_line(loc)}), and tracejit cannot make that call again when "
                                "the program runs, so it cannot guard the value. Compute it with tensor "
                                "operations, or move it out of the traced function")
        tracer.unguarded_reads.append(name)
        return
    if not any(isinstance(o, Value) and _may_change(tracer, o) for o in (*operands, *kw.values())):
        return   # only captured constants: the answer never changes
    expected = plain_value(result)
    if isinstance(expected, str) and len(expected) > _MAX_TEXT:
        return _refuse_long(name, loc, by_user)
    kind = "meta" if name in METADATA else "value"
    what = f"{_called(name)} gave {_short(expected)}"
    tracer.ledger.add("metadata" if kind == "meta" else "value_read", f"{what}; a Python value out of a tensor",
                      loc, expected, warn=by_user)
    tracer.guards.add(kind, "call", tuple(operands), expected, expected, what, loc, call=form, kwargs=kw)


def refuse_helper_result(tracer, func, result, before: int) -> None:
    """A torch function written in Python (``x.is_shared()``), called by user code, returned a Python value
    made from reads no guard can check (a storage handle, a call that cannot be made again): refused at
    the user's line, as the read itself would be (``x.is_shared()`` reads ``x.untyped_storage()``)."""
    if len(tracer.unguarded_reads) == before or result is None or holds_tensor(result):
        return
    reads = sorted(set(tracer.unguarded_reads[before:]))
    del tracer.unguarded_reads[before:]
    loc = user_location(3)
    if _caller_is_torch(func) or (loc is not None and in_torch(loc)):
        tracer.unguarded_reads.extend(reads)   # torch's own helper inside torch: the outer call decides
        return
    name = getattr(func, "__qualname__", getattr(func, "__name__", "the call"))
    raise BoundaryError(f"'{name}' at {loc} ({_line(loc)}) returned a Python value ({type(result).__name__}) made "
                        f"from reads no guard can check ({', '.join(map(repr, reads))}: a storage handle or a call "
                        "tracejit cannot make again), so it would be frozen. Compute it with tensor operations, "
                        "or move it out of the traced function")


def _caller_is_torch(func) -> bool:
    """Is the code that called ``func`` (above its own frame, tracejit's and torch's dispatch) torch's?"""
    code = getattr(func, "__code__", None)
    f = sys._getframe(2)
    while f is not None and (f.f_code is code or f.f_code.co_filename.startswith(_TRACEJIT_DIR)
                             or f.f_code.co_filename.endswith(("torch/overrides.py", "torch\\overrides.py"))):
        f = f.f_back
    return f is not None and f.f_code.co_filename.startswith(_TORCH_DIR)


def _refuse_long(name, loc, by_user):
    if by_user:
        raise BoundaryError(f"{_called(name)} at {loc} gave a text longer than {_MAX_TEXT} characters; "
                            "tracejit does not keep it as a guard")


def _operands(tracer, args, kwargs):
    """The call's arguments as graph values and constants, or None when one cannot be written in a file."""
    try:
        ops = [_operand(tracer, a) for a in args]
        kw = {k: _operand(tracer, v) for k, v in kwargs.items()}
    except _Unwritable:
        return None, None
    return ops, kw


class _Unwritable(Exception):
    pass


def _operand(tracer, a, depth: int = 0):
    if isinstance(a, torch.Tensor):
        return tracer.value_of(a)
    if isinstance(a, (list, tuple)) and depth < 4:
        items = [_operand(tracer, x, depth + 1) for x in a]
        return items if isinstance(a, list) else tuple(items)
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return tracer.to_ir(a)   # a traced size or float: its Value; else the number
    if a is None or isinstance(a, (bool, str, torch.dtype, torch.memory_format, torch.layout)):
        return a
    raise _Unwritable


def _may_change(tracer, v: Value) -> bool:
    return v.producer is None or v.producer.op != "tracejit::constant"


def _called(name: str) -> str:
    if name in FORMATTING:
        return f"{FORMATTING[name].split(':')[1]}(tensor)"
    return f"'{name}'"


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _line(loc) -> str:
    return f"`{source_text(loc)}`"


def refuse_unguardable_inputs(args, kwargs) -> None:
    """Example inputs that are tensor subclasses or carry Python attributes are refused at trace time."""
    leaves, _ = flatten((tuple(args), dict(kwargs)))
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor) and (type(leaf) not in INPUT_TYPES or leaf.__dict__):
            raise BoundaryError(f"example input {i} is a {tensor_kind(leaf)}: what the traced code reads of its Python "
                                "type (isinstance) or attributes never reaches the recorder, so it cannot be "
                                "guarded. Pass plain tensors, and other values as arguments")
