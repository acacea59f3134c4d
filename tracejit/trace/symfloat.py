"""Float math on traced sizes, recorded rather than guarded.

TF-style "same" padding, ``h / 2``, ``int(h * 0.5)``, ``math.ceil(h / 32) * 32`` and
``max(pad, 0)`` are Python float / int math on sizes. While tracing:

- ``TracedInt / n``, ``TracedInt * 0.5`` (and ``+ - //`` with floats) give a ``TracedFloat``
  recorded as ``aten::div.int``, ``aten::mul.int_float``, ...;
- ``math.ceil`` / ``math.floor`` / ``math.trunc`` / ``round`` of a TracedFloat and
  ``max`` / ``min`` of traced numbers are recorded as ``tracejit::sym_math`` (attr ``fn``);
- a comparison of a TracedFloat guards that predicate (as size comparisons do), and
  ``int()`` / ``bool()`` / ``float()`` of one guards the value it gave (``int(h * 0.5) == 112``:
  CPython turns whatever ``__int__`` returns into a plain int, so that read cannot be recorded).

``math.sqrt`` of a size stays a guard on the size (``float()`` of a TracedInt).
"""
from __future__ import annotations

import builtins
import math
import operator

import torch
import torch.nn.functional  # noqa: F401  (its ``_sym_int`` gets a stand-in)

from ..ops.names import SYM_FNS, SYM_MATH  # noqa: F401  (SYM_FNS: the functions sym_math may call)
from ..ir import Node, ScalarType, Value
from . import patches
from .provenance import TracedFloat
from .source import user_location
from .symbolic import TracedInt, get_tracer, register_float_op


_FLOAT_OPS = {"add": ("+", operator.add), "sub": ("-", operator.sub), "mul": ("*", operator.mul),
              "div": ("/", operator.truediv), "floordiv": ("//", operator.floordiv)}
# overloads ATen has for each (op, operand kinds); others fall back to ``.float``
_OVERLOADS = {"int_int": {"div": "int"}, "int_float": {"add", "sub", "mul", "floordiv"},
              "float_int": {"add", "sub", "mul", "floordiv"}}


def _traced(x) -> bool:
    return isinstance(x, (TracedInt, TracedFloat))


def _tracer_with_frames():
    t = get_tracer()
    return t if t is not None and t.frames else None


def float_op(name: str, a, b, depth: int = 3):
    """``a <op> b`` with one operand traced and a float result (or any float operand): recorded."""
    sym, fn = _FLOAT_OPS[name]
    value = fn(_plain(a), _plain(b))
    tracer = _tracer_with_frames()
    if tracer is None:
        return value
    args = (tracer.to_ir(a), tracer.to_ir(b))
    if not any(isinstance(x, Value) for x in args):
        return value
    kinds = "_".join("float" if isinstance(x, float) else "int" for x in (a, b))
    table = _OVERLOADS.get(kinds, {})
    overload = table.get(name) if isinstance(table, dict) else (kinds if name in table else None)
    node = Node(f"aten::{name}.{overload or 'float'}", f"op:{sym}", args, source=user_location(depth))
    tracer.frame.graph.add_node(node, [ScalarType("float")], dynamic=True)
    return _bind(tracer, TracedFloat(value), node)


register_float_op(float_op)   # TracedInt's float math (symbolic.py) records through it


def sym_math(fn: str, operands: tuple, value, depth: int = 3):
    """Record ``fn(*operands)`` (ceil, floor, trunc, round, max, min) on traced numbers."""
    tracer = _tracer_with_frames()
    if tracer is None:
        return value
    args = tuple(tracer.to_ir(o) for o in operands)
    if not any(isinstance(x, Value) for x in args):
        return value
    is_int = isinstance(value, int) and not isinstance(value, bool)
    node = Node(SYM_MATH, "", args, attrs={"fn": fn}, source=user_location(depth))
    tracer.frame.graph.add_node(node, [ScalarType("int" if is_int else "float")], dynamic=True)
    return _bind(tracer, TracedInt(value) if is_int else TracedFloat(value), node)


def _bind(tracer, obj, node: Node):
    tracer.frame.bind(obj, node.outputs[0])
    return obj


def _plain(x):
    if isinstance(x, TracedInt):
        return int.__int__(x)
    if isinstance(x, TracedFloat):
        return float.__float__(x)
    return x


# ---- TracedFloat: rounding, comparisons and reads --------------------------------------------------
def _rounding(fn: str, python_fn):
    def method(self, *ndigits):
        plain = float.__float__(self)
        if ndigits and ndigits[0] is not None:   # round(x, 2) is a float: guard it rather than record it
            return _guard_read(self, "float", f"round(..., {ndigits[0]})", python_fn(plain, *ndigits))
        return sym_math(fn, (self,), python_fn(plain))
    method.__name__ = f"__{fn}__"
    return method


def _guard_read(tf, test: str, how: str, value):
    """A traced float became a plain Python value: guard the value it gave (``int(h * 0.5) == 112``)."""
    tracer = _tracer_with_frames()
    if tracer is not None:
        v = tracer._int_value(tf)
        if v is not None:
            loc = user_location(3)
            tracer.ledger.add("size", f"a traced float computed from sizes was {how}", loc, value)
            tracer.guards.add("size", test, (v,), value, value, f"a traced float computed from sizes was {how}", loc)
    return value


def guard_float(tf, how: str) -> float:
    """``tf`` as a plain float, its value guarded (the float-method escapes of number_escapes.py)."""
    return _guard_read(tf, "float", how, float.__float__(tf))


_COMPARE = {"__eq__": ("eq", operator.eq), "__ne__": ("ne", operator.ne), "__lt__": ("lt", operator.lt),
            "__le__": ("le", operator.le), "__gt__": ("gt", operator.gt), "__ge__": ("ge", operator.ge)}


def _comparison(name: str, test: str, fn):
    def method(self, other):
        if not isinstance(other, (int, float)):
            return NotImplemented
        outcome = fn(float.__float__(self), _plain(other))
        tracer = _tracer_with_frames()
        if tracer is not None:
            v = tracer._int_value(self)
            if v is not None:
                loc = user_location(2)
                operand = tracer.to_ir(other) if _traced(other) else other
                what = f"a traced float computed from sizes was compared ({test} {_plain(other)!r})"
                tracer.ledger.add("size", what, loc, float.__float__(self))
                tracer.guards.add("size", test, (v, operand), bool(outcome), float.__float__(self), what, loc)
        return outcome
    method.__name__ = name
    return method


def _install_float_methods() -> None:
    for name, (test, fn) in _COMPARE.items():
        setattr(TracedFloat, name, _comparison(name, test, fn))
    TracedFloat.__hash__ = float.__hash__
    TracedFloat.__ceil__ = _rounding("ceil", math.ceil)
    TracedFloat.__floor__ = _rounding("floor", math.floor)
    TracedFloat.__trunc__ = _rounding("trunc", math.trunc)
    TracedFloat.__round__ = _rounding("round", round)
    TracedFloat.__int__ = lambda self: _guard_read(self, "int", "int()", int(float.__float__(self)))
    TracedFloat.__bool__ = lambda self: _guard_read(self, "truth", "bool()", bool(float.__float__(self)))
    for name, fn in (("pow", operator.pow), ("mod", operator.mod), ("divmod", divmod)):
        setattr(TracedFloat, f"__{name}__", _guarded_binary(name, fn, False))
        setattr(TracedFloat, f"__r{name}__", _guarded_binary(name, fn, True))
    TracedFloat.__abs__ = lambda self: sym_math("max", (self, -self), abs(float.__float__(self)))
    for name in ("floordiv",):
        setattr(TracedFloat, f"__{name}__", lambda self, other, n=name: _float_or_not(n, self, other, False))
        setattr(TracedFloat, f"__r{name}__", lambda self, other, n=name: _float_or_not(n, self, other, True))


def _guarded_binary(name, fn, reflected):
    """``**``, ``%``, ``divmod`` of a traced float: not recorded, so the float's value is guarded."""
    def method(self, other):
        if not isinstance(other, (int, float)) or isinstance(other, bool):
            return NotImplemented
        plain = _guard_read(self, "float", f"used in '{name}'", float.__float__(self))
        other = _plain(other)
        return fn(other, plain) if reflected else fn(plain, other)
    method.__name__ = f"__{'r' if reflected else ''}{name}__"
    return method


# math functions read a float subclass's value without asking it: a traced float passed to one is guarded
# (log, log2, log10 read ints too: their stand-in in guards.py handles both)
_MATH_FLOAT_READERS = ("sqrt", "exp", "expm1", "log1p", "pow", "sin", "cos", "tan", "asin",
                       "acos", "atan", "atan2", "sinh", "cosh", "tanh", "fabs", "hypot", "fmod", "copysign", "erf",
                       "erfc", "gamma", "lgamma", "isfinite", "isinf", "isnan", "isclose", "modf", "frexp", "ldexp",
                       "degrees", "radians", "remainder", "fsum", "prod", "dist", "cbrt", "exp2")


def plain_math_args(name: str, args) -> tuple:
    """A math function's arguments with each traced float guarded and made plain."""
    return tuple(_guard_read(a, "float", f"passed to math.{name}()", float.__float__(a))
                 if isinstance(a, TracedFloat) else a for a in args)


def _math_stand_in(original):
    def stand_in(*args, **kwargs):
        if get_tracer() is not None and any(isinstance(a, TracedFloat) for a in args):
            args = plain_math_args(original.__name__, args)
        return original(*args, **kwargs)
    stand_in.__name__ = original.__name__
    stand_in.__doc__ = original.__doc__
    return stand_in


def _float_or_not(name, self, other, reflected):
    if not isinstance(other, (int, float)) or isinstance(other, bool):
        return NotImplemented
    a, b = (other, self) if reflected else (self, other)
    return float_op(name, a, b, depth=4)


_install_float_methods()


# ---- max / min of traced numbers ----------------------------------------------------------------
def _make_extreme(original):
    fn = original.__name__

    def stand_in(*args, **kwargs):
        operands = args
        if len(args) == 1 and type(args[0]) in (list, tuple, torch.Size) and len(args[0]) >= 1:
            operands = tuple(args[0])   # min(x.shape[-2:]): the iterable's items, folded pairwise in order
        if kwargs or len(operands) < 2 or not any(_traced(a) for a in operands) or get_tracer() is None \
                or not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in operands):
            return original(*args, **kwargs)
        out = operands[0]
        for b in operands[1:]:   # Python keeps the first of equal extremes: equal values, the same result
            out = sym_math(fn, (out, b), original(_plain(out), _plain(b)))
        return out
    stand_in.__name__ = fn
    stand_in.__doc__ = original.__doc__
    return stand_in


# ---- torch.sym_int (F.interpolate's output size, ``int(h * scale)``) -----------------------------------
def _make_sym_int(original):
    """``torch.sym_int(a)``: for a traced float ``math.trunc(a)`` (recorded; ``int()`` of a float truncates),
    for a traced size the size itself; anything else as torch does."""
    def stand_in(a):
        if get_tracer() is not None:
            if isinstance(a, TracedFloat):
                return math.trunc(a)
            if isinstance(a, TracedInt):
                return a
        return original(a)
    stand_in.__name__ = original.__name__
    stand_in.__doc__ = original.__doc__
    return stand_in


for _name in _MATH_FLOAT_READERS:
    if hasattr(math, _name):
        patches.register(math, _name, _math_stand_in)
patches.register(builtins, "max", _make_extreme)
patches.register(builtins, "min", _make_extreme)
patches.register(torch, "sym_int", _make_sym_int)
patches.register(torch.nn.functional, "_sym_int", _make_sym_int)   # interpolate calls it by this name
