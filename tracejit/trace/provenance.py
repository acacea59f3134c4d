"""Device- and dtype-relative capture: ``dtype=x.dtype``, ``device=x.device``, ``torch.finfo(x.dtype).min``.

``torch.dtype`` and ``torch.device`` objects cannot carry where they came
from, so tracejit remembers, per value, the tensor whose ``.dtype`` /
``.device`` user code read last. When a recorded call receives that dtype or
device, the argument becomes a recorded value::

    tracejit::dtype_of(x)             -> x.dtype
    tracejit::device_of(x)            -> x.device
    tracejit::finfo(dtype) [attr]     -> torch.finfo(dtype).min   (min, max, eps, tiny)

An argument written as a literal on the call's source line (``torch.float32``,
``torch.long``, ``.float()``, ``"cpu"``, ``torch.device(...)``) stays a constant,
unless that same line read the dtype from a tensor: that is the RMSNorm pattern
``x.to(torch.float32) ... .to(input_dtype)``. A local variable on the call's line that
its function assigned only literals (``compute_dtype = torch.float32``) is a
constant too. Known limit: a literal reaching the call another way (an argument, an
attribute) that equals a dtype read earlier is taken as a copy of the read. Every relative
capture is written to the ledger (kinds ``dtype`` / ``device``) with both lines.
"""
from __future__ import annotations

import linecache
import re
import sys

import torch

from ..ops.names import DEVICE_OF, DTYPE_OF, FINFO, FINFO_ATTRS
from ..ir import Node, ScalarType, Value
from .source import in_torch, user_location
from .symbolic import get_tracer


_DTYPE_WORDS: dict = {}
for _name in dir(torch):
    _obj = getattr(torch, _name, None)
    if isinstance(_obj, torch.dtype):
        _DTYPE_WORDS.setdefault(_obj, set()).add(_name)
_METHOD_WORDS = {torch.float32: ("float",), torch.float64: ("double",), torch.float16: ("half",),
                 torch.bfloat16: ("bfloat16",), torch.int64: ("long",), torch.int32: ("int",), torch.bool: ("bool",)}


class _Token:
    """Stands for the value a dtype / device was read from, in the frame that read it."""


class TracedFloat(float):
    """A float that names the recorded value it came from (``torch.finfo(x.dtype).min``).

    ``+ - * /`` and negation with Python numbers are recorded (``torch.finfo(dtype).max - 1000``,
    as T5 clamps); any other use gives a plain float.
    """

    __slots__ = ()

    def __neg__(self):
        return _float_op("neg", "u-", -float.__float__(self), (self,))

    def __pos__(self):
        return self


def _arith(name: str, sym: str, fn, reverse: bool):
    def method(self, other):
        if not isinstance(other, (int, float)) or isinstance(other, bool):
            return NotImplemented
        a, b = (other, self) if reverse else (self, other)
        return _float_op(name, sym, fn(_as_float(a), _as_float(b)), (a, b))
    method.__name__ = f"__{'r' if reverse else ''}{name}__"
    return method


def _as_float(x) -> float:
    """A plain float of ``x`` without asking a traced number (``float(x)`` would guard it: ``h / 2 / 3.0``
    then pinned ``h / 2``; the operation is recorded, so nothing needs the value guarded)."""
    if isinstance(x, float):
        return float.__float__(x)
    return float(int.__int__(x)) if isinstance(x, int) else float(x)


for _name, _sym, _fn in (("add", "+", float.__add__), ("sub", "-", float.__sub__), ("mul", "*", float.__mul__),
                         ("truediv", "/", float.__truediv__)):
    setattr(TracedFloat, f"__{_name}__", _arith(_name, _sym, _fn, False))
    setattr(TracedFloat, f"__r{_name}__", _arith(_name, _sym, _fn, True))


def _float_op(name: str, sym: str, value: float, operands):
    """Record Python float arithmetic on a TracedFloat as ``aten::<op>.float`` (or ``.int_float`` ...)."""
    tracer = get_tracer()
    if tracer is None or not tracer.frames:
        return value
    args = tuple(tracer.to_ir(o) for o in operands)
    if not any(isinstance(a, Value) for a in args):
        return value
    kinds = "_".join("float" if isinstance(o, float) else "int" for o in operands)
    overload = "float" if kinds in ("float", "float_float") else kinds
    aten = "div" if name == "truediv" else name
    node = Node(f"aten::{aten}.{overload}", f"op:{sym}", args, source=user_location(3))
    tracer.frame.graph.add_node(node, [ScalarType("float")], dynamic=any(getattr(a, "dynamic", False) for a in args))
    result = TracedFloat(value)
    tracer.frame.bind(result, node.outputs[0])
    return result


def note_read(tracer, t, prop: str, result) -> None:
    """User code read ``t.dtype`` / ``t.device``: remember ``t`` as the latest source of that value."""
    loc = user_location(4)
    if loc is None or in_torch(loc) or not tracer._known_outside(t, tracer.frame):
        return
    reads = tracer.__dict__.setdefault("_provenance", {})
    # the value t has now (``x.to(x.dtype)`` returns x itself and rebinds it); a token finds it from submodules.
    # A tensor this frame has not used yet (a parameter read for its dtype) is looked up when the read is used.
    token = None
    value = tracer.frame.env.get(id(t))
    if value is not None:
        token = _Token()
        tracer.frame.bind(token, value)
    reads[(prop, result)] = (t, token, loc)


def relate(tracer, node_args, node_kwargs, loc):
    """Replace dtypes and devices in a call's arguments by values derived from the tensors they came from."""
    reads = tracer.__dict__.get("_provenance")
    if not reads or loc is None or in_torch(loc):   # torch's own layer code: its dtypes stay as recorded
        return node_args, node_kwargs
    line = _line(loc)

    def mapper(a):
        return _relative(tracer, reads, a, line, loc)
    return _map(node_args, mapper), {k: _map(v, mapper) for k, v in node_kwargs.items()}


def derived(tracer, obj, loc):
    """A recorded value for a dtype or device seen at ``loc``, or the object itself."""
    reads = tracer.__dict__.get("_provenance")
    if not reads or loc is None or in_torch(loc):
        return obj
    return _relative(tracer, reads, obj, _line(loc), loc)


def _map(obj, fn):
    if isinstance(obj, (torch.dtype, torch.device)):
        return fn(obj)
    if isinstance(obj, list):
        return [_map(o, fn) for o in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_map(o, fn) for o in obj)
    return obj


def _relative(tracer, reads, obj, line: str, loc):
    if not isinstance(obj, (torch.dtype, torch.device)):
        return obj
    prop = "dtype" if isinstance(obj, torch.dtype) else "device"
    seen = reads.get((prop, obj))
    if seen is None:
        return obj
    t, token, read_at = seen
    same_line = loc is not None and read_at == loc   # ``.to(x.dtype)``: the read is in this very call
    if not same_line and (_literal_on_line(obj, line) or _assigned_a_literal(obj, line, loc)):
        return obj
    frame = tracer.frame
    cache = frame.__dict__.setdefault("_derived", {})
    source = tracer._int_value(token) if token is not None else None
    if source is None:   # read inside a submodule call that has returned: the tensor as the caller knows it
        if not tracer._known_outside(t, frame):
            return obj
        source = tracer.value_of(t)
    key = (prop, id(source))
    value = cache.get(key)
    if value is None:
        op = DTYPE_OF if prop == "dtype" else DEVICE_OF
        node = Node(op, "", (source,), source=loc)
        frame.graph.add_node(node, [ScalarType(prop)], dynamic=source.dynamic)
        value = cache[key] = node.outputs[0]
        tracer.ledger.add(prop, f"the {prop} {obj} used here follows the tensor whose .{prop} was read at "
                                f"{read_at}", loc, str(obj), warn=False)
    return value


def _line(loc) -> str:
    if loc is None:
        return ""
    return linecache.getline(loc.filename, loc.lineno)


def _literal_on_line(obj, line: str) -> bool:
    """Does the source line name this dtype / device literally (so it is a constant, not a copy)?"""
    if isinstance(obj, torch.dtype):
        words = _DTYPE_WORDS.get(obj, ())
        if any(re.search(rf"\btorch\.{w}\b", line) for w in words):
            return True
        return any(re.search(rf"\.{w}\(\s*\)", line) for w in _METHOD_WORDS.get(obj, ()))
    return bool(re.search(r"""torch\.device\(|["'](cpu|cuda|meta|mps|xpu)(:\d+)?["']""", line))


def _assigned_a_literal(obj, line: str, loc) -> bool:
    """Is a variable on the call's line that holds ``obj`` assigned only literals in its function
    (``compute_dtype = torch.float32`` earlier in the function)? Parameters and attributes: no."""
    frame = _user_frame(loc)
    if frame is None:
        return False
    names = [n for n, v in frame.f_locals.items() if v is obj and re.search(rf"\b{re.escape(n)}\b", line)]
    if not names:
        return False
    first = frame.f_code.co_firstlineno
    body = [linecache.getline(loc.filename, i) for i in range(first, loc.lineno)]
    for name in names:
        rhs = [m.group(1) for text in body
               for m in [re.match(rf"\s*(?:[\w.]+\s*,\s*)*{re.escape(name)}\s*(?:,\s*[\w.]+\s*)*=(?!=)(.*)", text)]
               if m is not None]
        if not rhs or any(".dtype" in r or ".device" in r for r in rhs):
            return False
        if not all(_literal_on_line(obj, r) for r in rhs):
            return False
    return True


def _user_frame(loc):
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_filename == loc.filename and f.f_lineno == loc.lineno:
            return f
        f = f.f_back
    return None


class _TracedFinfo:
    """``torch.finfo(dtype)`` while tracing: its float attributes name a recorded ``tracejit::finfo`` value."""

    def __init__(self, tracer, real, dtype_value, loc):
        self._tracer = tracer
        self._real = real
        self._dtype_value = dtype_value
        self._loc = loc

    def __getattr__(self, name):
        real = getattr(self._real, name)
        if name not in FINFO_ATTRS or self._tracer.frames == []:
            return real
        node = Node(FINFO, "", (self._dtype_value,), attrs={"attr": name}, source=self._loc)
        self._tracer.frame.graph.add_node(node, [ScalarType("float")], dynamic=self._dtype_value.dynamic)
        tf = TracedFloat(real)
        self._tracer.frame.bind(tf, node.outputs[0])
        return tf

    def __repr__(self):
        return repr(self._real)


def make_finfo(original):
    """A replacement for ``torch.finfo`` that records while a trace records (``get_tracer()``)."""

    def finfo(dtype=None):
        real = original() if dtype is None else original(dtype)
        tracer = get_tracer()
        if tracer is None or dtype is None or not tracer.frames:
            return real
        loc = user_location(2)
        with torch._C.DisableTorchFunction():
            value = derived(tracer, dtype, loc)
        if value is dtype:
            return real
        return _TracedFinfo(tracer, real, value, loc)
    finfo.__doc__ = original.__doc__
    return finfo
