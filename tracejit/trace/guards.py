"""Guards made while recording: each Python read of a traced value becomes a ``tracejit::guard`` node.

A guard states the predicate the trace relied on, in terms of recorded values,
at the user's source line (see ir/ops.py for the tests). ``GuardMaker`` is
owned by the Tracer; it dedupes identical guards per graph and keeps the
ledger entry of each guard pointing at its node.
"""
from __future__ import annotations

import math

import torch

from ..ir import GUARD, GUARD_KINDS, Node, Value
from ..ir.guard_nodes import training_guard  # noqa: F401  (the tracer's name for it)
from .boundary import PLAIN_VALUE_TESTS, plain_value
from .ledger import attach_guard
from . import patches
from .index_reads import IndexScanner
from .source import source_text
from .symbolic import TracedInt, get_tracer

_COMPARE = {"__eq__": "eq", "__ne__": "ne", "__lt__": "lt", "__le__": "le", "__gt__": "gt", "__ge__": "ge"}
_VALUE_TESTS = {"__bool__": "truth", "is_nonzero": "truth", "item": "item", "__int__": "int", "__index__": "int",
                "__float__": "float", "tolist": "tolist", "numpy": "tolist", "__array__": "tolist", "equal": "equal"}


def policy_allows(policy, kind: str) -> bool:
    """guards=True keeps every guard, "shapes" the ones that need no device sync, False none."""
    if policy is True:
        return True
    if policy == "shapes":
        return GUARD_KINDS[kind] == "free"
    return False


def check_policy(policy) -> None:
    if policy not in (True, False, "shapes"):
        raise ValueError(f"guards must be True, False or 'shapes'; got {policy!r}")


def _plain(x):
    if isinstance(x, bool) or x is None:
        return x
    if isinstance(x, int):
        return int.__int__(x)
    if isinstance(x, float):
        return float(x)
    if isinstance(x, (list, tuple)):
        return [_plain(i) for i in x]
    return x


def _key(operand):
    return ("v", id(operand)) if isinstance(operand, Value) else ("c", repr(operand))


class GuardMaker:
    def __init__(self, tracer, policy=True):
        self.tracer = tracer
        self.policy = policy
        self.seen: dict[int, set] = {}
        self.scanner = IndexScanner(tracer)

    def add(self, kind: str, test: str, operands: tuple, expected, seen, what: str, loc, call: str | None = None,
            kwargs: dict | None = None) -> Node | None:
        if not policy_allows(self.policy, kind):
            return None
        graph = self.tracer.frame.graph
        key = (test, call, tuple(_key(o) for o in operands), tuple((k, _key(v)) for k, v in (kwargs or {}).items()),
               repr(expected))
        keys = self.seen.setdefault(id(graph), set())
        if key in keys:
            return None
        keys.add(key)
        if test in PLAIN_VALUE_TESTS:   # NaN, signed zeros, tuples: compared as plain_value gives them
            expected, seen = plain_value(expected), plain_value(seen)
        attrs = {"kind": kind, "test": test, "expected": _plain(expected), "seen": _plain(seen), "what": what,
                 "line": source_text(loc)}
        if call is not None:
            attrs["call"] = call
        node = Node(GUARD, "", operands, kwargs or {}, attrs=attrs, source=loc, effectful=True)
        graph.add_node(node, [])
        if kind != "rank":   # rank reads have no ledger entry (they freeze nothing unguarded)
            attach_guard(self.tracer.ledger, node)
        return node

    # ---- the kinds ------------------------------------------------------------------------------
    def size(self, ti, how: str, value, loc, method: str | None = None, other=None, outcome=None) -> None:
        """A traced size used as a Python value: a comparison guards exactly that predicate."""
        tracer = self.tracer
        subject = tracer._int_value(ti)
        if subject is None:
            return
        test = _COMPARE.get(method or "")
        if test is not None and outcome is not None:
            operand = other
            if isinstance(other, TracedInt):
                operand = tracer._int_value(other)
                operand = int.__int__(other) if operand is None else operand
            self.add("size", test, (subject, operand), bool(outcome), value, f"a traced size was {how}", loc)
            return
        self.add("size", "eq", (subject, value), True, value, f"a traced size was {how}", loc)
        if isinstance(other, TracedInt):
            other_v = tracer._int_value(other)
            if other_v is not None:
                self.add("size", "eq", (other_v, int.__int__(other)), True, int.__int__(other),
                         f"a traced size was {how}", loc)

    def value(self, name: str, args, result, what: str, loc) -> None:
        """Python read a value out of a tensor: recompute it at call time, compare with this one."""
        test = _VALUE_TESTS.get(name)
        if test is None or not isinstance(args[0], torch.Tensor):
            return
        operands = (self.tracer.value_of(args[0]),)
        if test == "equal":
            if len(args) < 2 or not isinstance(args[1], torch.Tensor):
                return
            operands += (self.tracer.value_of(args[1]),)
        expected = result.tolist() if hasattr(result, "tolist") and not isinstance(result, (int, float)) else result
        self.add("value", test, operands, expected, expected, what, loc)

    def length(self, t, n: int, what: str, loc) -> None:
        v = self.tracer.value_of(t)
        if v.dynamic:
            self.add("length", "len", (v,), n, n, what, loc)

    def rank(self, t, what: str, loc) -> None:
        v = self.tracer.value_of(t)
        if v.dynamic:
            self.add("rank", "dim", (v,), t.dim(), t.dim(), what, loc)


# math functions that read an int subclass's digits without asking it: while tracing, a traced
# size passed to them is specialized (and guarded) first
_MATH_INT_READERS = ("log", "log2", "log10", "gcd", "lcm", "isqrt", "factorial", "comb", "perm")


def _guarded_math(original):
    def stand_in(*args, **kwargs):
        if get_tracer() is not None and any(isinstance(a, TracedInt) for a in args):
            args = tuple(a._specialize(f"passed to math.{original.__name__}()") if isinstance(a, TracedInt) else a
                         for a in args)
        if get_tracer() is not None:
            args = symfloat.plain_math_args(original.__name__, args)
        return original(*args, **kwargs)
    stand_in.__name__ = original.__name__
    stand_in.__doc__ = original.__doc__
    return stand_in


for _name in _MATH_INT_READERS:
    if hasattr(math, _name):
        patches.register(math, _name, _guarded_math)


from . import index_reads, module_flags, symfloat, number_escapes, numpy_reads, float_reads, float_operands  # noqa: E402,F401  (their stand-ins register with patches)
