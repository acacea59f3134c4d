"""The boundary rule for traced numbers: every way a TracedInt / TracedFloat becomes a plain value is guarded.

A traced size (``TracedInt``, symbolic.py) or a float computed from sizes (``TracedFloat``,
symfloat.py) is a real ``int`` / ``float``; any method of ``int`` / ``float`` that it does not
override hands out a plain Python value that the trace would freeze. So the rule is written over
``dir(int)`` / ``dir(float)``, not over a list of known escapes: every method is

- recorded symbolically (``SYMBOLIC``: ``+ - * // % /``, ``neg``, ``ceil`` ...: defined by
  symbolic.py / symfloat.py / provenance.py),
- guarded by a rule of its own that states a sharper predicate (``OWN_RULE``: comparisons guard
  the comparison, ``int()`` / ``bool()`` / ``**`` the value),
- identity-like (``real``, ``numerator``, ``conjugate()``, ``__index__``-free ``__trunc__``): gives
  the traced number itself,
- on ``EXEMPT`` (object machinery and class-level constructors, with the reason), or
- wrapped here: the traced number is specialized (an equality guard on its value at the user's
  line, as for ``int(n)``) and the plain method runs on the plain value. A traced size that is hashed
  (a key of a dict or an ``lru_cache``: einops' recipes) is also *pinned*: its value is guarded, so
  arithmetic on it from then on gives plain ints, as a cache hit gives the values an earlier call
  computed (the checker's retrace then records what the trace recorded).

tests/guards/test_number_escapes.py fails when a method of ``int`` / ``float`` appears that none of
these covers (a new Python version), and calls every wrapped one to see its guard.
"""
from __future__ import annotations

import sys

import operator

from . import patches, symfloat
from .provenance import TracedFloat
from .source import _TRACEJIT_DIR
from .symbolic import TracedInt, get_tracer

# methods that give no value derived from the number (object machinery, class-level constructors)
EXEMPT = {
    "__class__": "the type object",
    "__delattr__": "attribute deletion (ints have no attributes)",
    "__dir__": "the list of attribute names",
    "__doc__": "the class docstring",
    "__getattribute__": "attribute lookup itself (each attribute found is covered by this rule)",
    "__init__": "object initialisation",
    "__init_subclass__": "class creation hook",
    "__new__": "constructor: int(n) / float(x) of a traced number call __int__ / __float__ (guarded)",
    "__setattr__": "attribute assignment (ints have no attributes)",
    "__subclasshook__": "issubclass support",
    "from_bytes": "classmethod: builds a new int from bytes, reads no traced value",
    "fromhex": "classmethod: builds a new float from a text, reads no traced value",
    "__getformat__": "classmethod: the platform's float format",
    "denominator": "1 for every int",
    "imag": "0 for every int and every real float",
}

# names the traced classes define themselves, recorded symbolically or guarded by their own rule
SYMBOLIC_INT = {"__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
                "__rfloordiv__", "__mod__", "__rmod__", "__neg__", "__pos__", "__abs__", "__truediv__",
                "__rtruediv__", "__ceil__", "__floor__", "__trunc__", "__round__"}
SYMBOLIC_FLOAT = {"__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                  "__rtruediv__", "__floordiv__", "__rfloordiv__", "__neg__", "__pos__", "__abs__", "__ceil__",
                  "__floor__", "__trunc__", "__round__"}
OWN_RULE = {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__pow__", "__rpow__", "__and__", "__or__",
            "__xor__", "__lshift__", "__rshift__", "__divmod__", "__int__", "__index__", "__float__", "__bool__",
            "__mod__", "__rmod__", "__rdivmod__"}
IDENTITY = {"real", "numerator", "conjugate"}
# formatting and hashing are also done by tracejit itself (names, messages): only user code's are guarded
_USER_ONLY = {"__repr__", "__str__", "__format__", "__hash__", "__reduce_ex__", "__reduce__", "__getnewargs__",
              "__getstate__", "__sizeof__"}


def covered(cls) -> set:
    """The names of ``int`` / ``float`` this rule accounts for on ``cls`` (TracedInt or TracedFloat)."""
    return {n for n in dir(cls.__mro__[1]) if n in EXEMPT or n in cls.__dict__ or n in _wrapped(cls)}


def _wrapped(cls) -> set:
    return getattr(cls, "_tj_wrapped", set())


def _from_tracejit() -> bool:
    f = sys._getframe(2)
    name = f.f_code.co_filename
    return name.startswith(_TRACEJIT_DIR) and not name.startswith(_TRACEJIT_DIR + "tests")


def _plain_int(n: TracedInt, how: str) -> int:
    return n._specialize(how)


def _plain_float(x: TracedFloat, how: str) -> float:
    return symfloat.guard_float(x, how)


def _escape(cls, base, name: str, plain_of):
    original = getattr(base, name)
    own = cls.__dict__.get(name)   # the traced class's own version (a plain int's repr, pickle recipe)

    def method(self, *args, **kwargs):
        if get_tracer() is None or (name in _USER_ONLY and _from_tracejit()):
            return own(self, *args, **kwargs) if own is not None else original(_raw(self), *args, **kwargs)
        plain = plain_of(self, f"passed to {base.__name__}.{name}() (it gives a plain value)")
        if name == "__hash__" and isinstance(self, TracedInt):
            get_tracer().pin(self)   # a key (a cache, a table): the trace holds its value from now on
        args = tuple(_raw_traced(a, plain_of) for a in args)
        if name in ("__reduce_ex__", "__reduce__"):   # pickle / copy: the plain number (its value guarded above)
            return (base, (plain,))
        return own(self, *args, **kwargs) if own is not None else original(plain, *args, **kwargs)
    method.__name__ = name
    method.__qualname__ = f"{base.__name__}.{name}"
    return method


def _raw(x):
    if isinstance(x, TracedInt):
        return int.__int__(x)
    if isinstance(x, TracedFloat):
        return float.__float__(x)
    return x


def _raw_traced(a, plain_of):
    """Another traced operand of the same call (``1 << n``): specialized too."""
    if isinstance(a, TracedInt):
        return a._specialize("an operand of a plain int operation")
    if isinstance(a, TracedFloat):
        return _plain_float(a, "an operand of a plain float operation")
    return a


def _identity(name):
    if name == "conjugate":
        return lambda self: self
    return property(lambda self: self)


def install(cls, symbolic: set, plain_of) -> None:
    base = cls.__mro__[1]
    wrapped = set()
    for name in dir(base):
        if name in EXEMPT or name in symbolic or (name in OWN_RULE and name in cls.__dict__):
            continue
        if name in IDENTITY:
            setattr(cls, name, _identity(name))
            continue
        if name == "__hash__":   # a slot: defining __hash__ on the class is what CPython calls
            cls.__hash__ = _escape(cls, base, name, plain_of)
            wrapped.add(name)
            continue
        if name in cls.__dict__ and name not in _USER_ONLY:
            continue
        setattr(cls, name, _escape(cls, base, name, plain_of))
        wrapped.add(name)
    cls._tj_wrapped = wrapped


def _repeat(original_name: str):
    """``[1.0] * n`` / ``n * "ab"``: sequence repetition reads the int directly; guard it first."""
    original = getattr(TracedInt, original_name)

    def method(self, other):
        if isinstance(other, (list, tuple, str, bytes, bytearray)) and get_tracer() is not None:
            return other * self._specialize("used to repeat a sequence")
        return original(self, other)
    method.__name__ = original_name
    return method


install(TracedInt, SYMBOLIC_INT, _plain_int)
install(TracedFloat, SYMBOLIC_FLOAT, _plain_float)
TracedInt.__mul__ = _repeat("__mul__")
TracedInt.__rmul__ = _repeat("__rmul__")


def _guarded_index(original):
    """``operator.index(n)`` returns an int subclass's value without asking it: specialize first."""
    def stand_in(obj):
        if isinstance(obj, TracedInt) and get_tracer() is not None:
            return obj._specialize("passed to operator.index()")
        return original(obj)
    stand_in.__name__ = original.__name__
    stand_in.__doc__ = original.__doc__
    return stand_in


patches.register(operator, "index", _guarded_index)
