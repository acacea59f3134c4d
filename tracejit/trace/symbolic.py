"""Sizes as traced ints.

While tracing, ``x.size(0)`` of a tensor whose shape depends on the inputs
returns a ``TracedInt``: a real ``int`` (so every Python and PyTorch API takes
it) that also names the graph Value it came from. Arithmetic on it
(``+ - * // % neg``) is recorded, so ``x.view(x.size(0), -1)`` replays on any
batch size; ``/`` and float operands give a recorded float (trace/symfloat.py).
Using it where the result cannot be recorded (a comparison, ``int()``,
``range()``, ``**``) returns a plain Python value, writes a ``size`` entry to
the ledger, with a TracerWarning, and guards it.
"""
from __future__ import annotations

import numbers
import operator
import threading

import torch


class _ThreadTracer(threading.local):
    tracer = None   # the Tracer recording in this thread, if any


_local = _ThreadTracer()


def set_tracer(t) -> None:
    """Make ``t`` the tracer of the calling thread (None: this thread stops tracing)."""
    _local.tracer = t


def get_tracer():
    """The Tracer recording in the calling thread, or None (other threads' traces are invisible here)."""
    return _local.tracer


_ARITH = {
    "__add__": (operator.add, "aten::add.int", "+", False),
    "__radd__": (operator.add, "aten::add.int", "+", True),
    "__sub__": (operator.sub, "aten::sub.int", "-", False),
    "__rsub__": (operator.sub, "aten::sub.int", "-", True),
    "__mul__": (operator.mul, "aten::mul.int", "*", False),
    "__rmul__": (operator.mul, "aten::mul.int", "*", True),
    "__floordiv__": (operator.floordiv, "aten::floordiv.int", "//", False),
    "__rfloordiv__": (operator.floordiv, "aten::floordiv.int", "//", True),
    "__mod__": (operator.mod, "aten::remainder.int", "%", False),
    "__rmod__": (operator.mod, "aten::remainder.int", "%", True),
}

_SPECIALIZE = {
    "__eq__": operator.eq, "__ne__": operator.ne, "__lt__": operator.lt, "__le__": operator.le,
    "__gt__": operator.gt, "__ge__": operator.ge, "__pow__": operator.pow, "__rpow__": lambda a, b: b ** a,
    "__and__": operator.and_, "__or__": operator.or_, "__xor__": operator.xor,
    "__lshift__": operator.lshift, "__rshift__": operator.rshift, "__divmod__": divmod,
}


class TracedInt(int):
    """An int that remembers which traced size it is."""

    __slots__ = ()

    def _plain(self) -> int:
        return int.__int__(self)

    def __repr__(self) -> str:
        return int.__repr__(self)

    __str__ = __repr__
    __hash__ = int.__hash__

    def __neg__(self):
        t = get_tracer()
        if t is None:
            return -self._plain()
        return t.int_op("aten::neg.int", "u-", -self._plain(), (self,))

    def __pos__(self):
        return self

    def __abs__(self):
        return self if self._plain() >= 0 else -self

    def __int__(self):
        return self._specialize("int()")

    def __index__(self):
        return self._specialize("used as an index (range(), list slicing, ...)")

    def __float__(self):
        return float(self._specialize("float()"))

    def __bool__(self):   # truth is ``!= 0``: guard that predicate, not the value (LongT5's ``if not all(x.shape)``)
        value = self._plain()
        t = get_tracer()
        if t is not None:
            t.specialize_size(self, "bool()", value, "__ne__", 0, value != 0)
        return value != 0

    def __ceil__(self):   # an int rounds to itself: nothing to guard
        return self

    __floor__ = __trunc__ = __ceil__

    def __round__(self, ndigits=None):
        return self if ndigits is None or ndigits >= 0 else round(self._specialize("round()"), ndigits)

    def __truediv__(self, other):
        return _float_math("div", self, other, False)

    def __rtruediv__(self, other):
        return _float_math("div", self, other, True)

    def __format__(self, spec):
        return format(self._plain(), spec)

    def __reduce__(self):
        return (int, (self._plain(),))

    def _specialize(self, how: str) -> int:
        t = get_tracer()
        value = self._plain()
        if t is not None:
            t.specialize_size(self, how, value)
        return value


def _declined(self, other, what: str):
    """A TracedInt's operator method is about to answer NotImplemented: Python then runs ``other``'s (reflected)
    method, and every number type but a tensor's reads the int's digits without asking it (``Fraction(1, 2) * n``,
    ``True + n``, ``[0.0] * n``, ``n * f(x)`` where ``f`` made a complex, ``n == Decimal(4)``). Default-deny: unless
    ``other`` is a tensor (whose method records the size), the size is guarded ``== value`` first (hunt30). An
    equality test with something that is not a number (``n == None``, ``n == "auto"``) reads nothing."""
    if isinstance(other, torch.Tensor) or hasattr(type(other), "__torch_function__") or get_tracer() is None:
        return NotImplemented
    if what in ("__eq__", "__ne__") and not (isinstance(other, numbers.Number) or type(other).__module__ == "numpy"):
        return NotImplemented
    self._specialize(f"used in '{what.strip('_')}' with a {type(other).__name__} (whose own method reads the "
                     "number without asking it)")
    return NotImplemented


def _make_arith(name, fn, op, sym, reflected):
    def method(self, other):
        if isinstance(other, bool) or not isinstance(other, int):
            return _declined(self, other, name)   # floats are handled by _make_arith_or_float
        a, b = (other, self) if reflected else (self, other)
        value = fn(int(a) if not isinstance(a, TracedInt) else a._plain(),
                   int(b) if not isinstance(b, TracedInt) else b._plain())
        t = get_tracer()
        if t is None:
            return value
        return t.int_op(op, sym, value, (a, b))
    method.__name__ = name
    return method


def _make_special(name, fn):
    def method(self, other, *modulo):
        if modulo:   # pow(n, e, m): three-argument pow reads every operand's value (guarded)
            plain = [v._specialize("used in pow() with a modulus") if isinstance(v, TracedInt) else v
                     for v in (self, other, modulo[0])]
            return pow(plain[0], plain[1], plain[2]) if name == "__pow__" else pow(plain[1], plain[0], plain[2])
        if isinstance(other, TracedInt):
            other_v = other._plain()
        elif isinstance(other, (int, float)):
            other_v = other
        else:
            return _declined(self, other, name)
        value = fn(self._plain(), other_v)
        t = get_tracer()
        if t is not None:
            t.specialize_size(self, f"used in '{name.strip('_')}' with {other_v!r}", self._plain(),
                              name, other, value)
        return value
    method.__name__ = name
    return method


_SPECIALIZE_METHODS = {n: _make_special(n, f) for n, f in _SPECIALIZE.items()}
for _n, _m in _SPECIALIZE_METHODS.items():
    setattr(TracedInt, _n, _m)


_float_op = None   # trace/symfloat.py's float_op, given by symfloat when it is imported (it imports this module)


def register_float_op(float_op) -> None:
    """Called by trace/symfloat.py at import: the function that records ``h / 2``, ``h * 0.5``."""
    global _float_op
    _float_op = float_op


def _float_math(name, self, other, reflected):
    """``h / 2``, ``h * 0.5``: recorded as float math (trace/symfloat.py, imported by trace/guards.py)."""
    if isinstance(other, bool) or not isinstance(other, (int, float)):
        return _declined(self, other, "__rtruediv__" if reflected else "__truediv__")
    if _float_op is None:
        raise RuntimeError("tracejit.trace.symfloat is not imported: float math on a traced size cannot be recorded")
    return _float_op(name, *((other, self) if reflected else (self, other)), depth=4)


_FLOAT_NAMES = {"aten::add.int": "add", "aten::sub.int": "sub", "aten::mul.int": "mul", "aten::floordiv.int": "floordiv"}


def _make_arith_or_float(name, fn, op, sym, reflected):
    arith = _make_arith(name, fn, op, sym, reflected)
    special = _make_special(name, (lambda a, b: fn(b, a)) if reflected else fn)

    def method(self, other):
        if isinstance(other, float):
            if op in _FLOAT_NAMES:
                return _float_math(_FLOAT_NAMES[op], self, other, reflected)
            return special(self, other)
        return arith(self, other)
    method.__name__ = name
    return method


for _n, (_f, _op, _sym, _r) in _ARITH.items():
    setattr(TracedInt, _n, _make_arith_or_float(_n, _f, _op, _sym, _r))


_builtin_range = range


class _RangeType(type):
    def __getattr__(cls, name):   # range.__getitem__, range.count ...: code that reads range's own members
        return getattr(_builtin_range, name)

    def __instancecheck__(cls, obj):
        return isinstance(obj, _builtin_range)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _builtin_range)

    def __call__(cls, *args):
        t = get_tracer()
        if t is not None:
            for a in args:
                if isinstance(a, TracedInt):
                    a._specialize("used in range(); the loop is unrolled to this many iterations")
        return _builtin_range(*args)


class traced_range(metaclass=_RangeType):
    """Stands in for ``range`` while tracing: ``range(x.size(0))`` cannot be recorded (CPython
    reads an int subclass without asking it), so this notes the specialization in the ledger."""
    _tj_range = True   # trace/c_readers.py: stands for the C type range
