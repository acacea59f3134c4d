"""Builtins that read a traced size without asking it when another operand is not an int.

``pow(1.5, n)``, ``pow(3, n, 5)``, ``divmod(7.0, n)``, ``divmod(7, n)``, ``sum([0.5, n])`` and ``math.prod([0.5, n])`` with ``n`` a
``TracedInt``: CPython runs the float's own arithmetic first (a ``TracedInt`` is an int, not a
float subclass, so its reflected method is not tried first), and that arithmetic reads an int
operand's digits directly. Nothing is recorded and nothing is guarded: the program would keep the
trace's number at every size (transformers' ``ExponentialDecayLengthPenalty``:
``pow(self.regulation_factor, cur_len - start)``).

While tracing, these builtins get stand-ins: where a traced size meets an operand that is not an
int (a float, a complex, anything else), the size is read as a Python value first, which guards it
(``size == 7``, at the user's line); the program re-traces or fails a named guard at another size.
Int-only calls, and calls with no traced size, run the builtin unchanged.

The same arithmetic written as an operator (``0.5 * n``, ``1.0 / n``, ``3.5 < n``): no Python hook runs for an
operator; those are found in the source (operand_scan.py).
"""
from __future__ import annotations

import builtins
import math

import torch

from . import patches
from .symbolic import TracedInt, get_tracer


def _mixed(values) -> bool:
    """A traced size next to an operand that is neither an int (bool counts as one) nor a tensor (a tensor's own
    arithmetic asks the size, and the recorder sees it)."""
    return any(isinstance(v, TracedInt) for v in values) and \
        any(not isinstance(v, (int, torch.Tensor)) for v in values)


def _plain(values, fn: str) -> list:
    return [v._specialize(f"used in {fn}() with a non-int operand") if isinstance(v, TracedInt) else v
            for v in values]


def _make_binary(original):
    """``pow(a, b[, m])``, ``divmod(a, b)``: every traced size among the operands is read (a ``TracedInt``'s own
    ``__pow__`` / ``__divmod__`` guard its value anyway; three-argument pow and ``divmod(7, n)`` never ask it)."""
    fn = original.__name__

    def stand_in(*args, **kwargs):
        if get_tracer() is not None and any(isinstance(v, TracedInt) for v in list(args) + list(kwargs.values())):
            args = tuple(_plain(args, fn))
            kwargs = dict(zip(kwargs, _plain(list(kwargs.values()), fn)))
        return original(*args, **kwargs)
    stand_in.__name__ = fn
    stand_in.__doc__ = original.__doc__
    return stand_in


def _make_fold(original):
    """``sum(iterable, start=0)``, ``math.prod(iterable, *, start=1)``."""
    fn = original.__name__

    def stand_in(iterable, /, *args, **kwargs):
        if get_tracer() is None:
            return original(iterable, *args, **kwargs)
        items = list(iterable)   # read once: a generator cannot be read twice
        starts = list(args) + list(kwargs.values())
        if _mixed(items + starts):
            items = _plain(items, fn)
            args = tuple(_plain(args, fn))
            kwargs = dict(zip(kwargs, _plain(list(kwargs.values()), fn)))
        return original(items, *args, **kwargs)
    stand_in.__name__ = fn
    stand_in.__doc__ = original.__doc__
    return stand_in


patches.register(builtins, "pow", _make_binary)
patches.register(builtins, "divmod", _make_binary)
patches.register(builtins, "sum", _make_fold)
patches.register(math, "prod", _make_fold)
