"""Budgets that hold when a program loaded from a file runs (docs/SECURITY.md, "call-time budgets").

Load-time checks see the traced sizes; at call time sizes follow the inputs and the ints the
program computes from them. So, in loaded programs only (a program traced in this process from
the user's own code is trusted), the generated code

- computes ``**``, ``<<`` and ``*`` on traced ints through ``INT_OPS``, which refuse a result
  beyond 64 bits before computing it (``size ** 10**18`` would otherwise run for ever);
- calls a size check before each op that can allocate more than its inputs (op_allowlist.py
  names the op's size function): the elements it is about to allocate must stay within
  max(ALLOC_FLOOR, ALLOC_PER_FILE_BYTE x file bytes, CALL_FACTOR x the elements of the call's
  input tensors or of the op's largest tensor argument). A root method with such checks first
  records its inputs' elements (``enter_call``); programs without them pay nothing.

Either raises BudgetError naming the op and the source line that recorded it, before any work.
"""
from __future__ import annotations

import math
import operator
import threading
from types import SimpleNamespace

from ..errors import BudgetError, GuardError

INT_BOUND = 2 ** 63
MAX_REPEATED_LIST = 65536
CALL_FACTOR = 64     # elements an op may make per element of its largest tensor argument


def _bounded(v, what: str):
    if isinstance(v, int) and not -INT_BOUND <= v < INT_BOUND:
        raise BudgetError(f"int arithmetic on traced sizes ({what}) leaves 64 bits; a program loaded from a file "
                          "may not compute such sizes")
    return v


def _pow(a, b):
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        if b * math.log2(abs(a)) >= 64:
            raise BudgetError(f"int arithmetic on traced sizes ({a} ** {b}) leaves 64 bits; a program loaded "
                              "from a file may not compute such sizes")
    return _bounded(a ** b, "**")


def _lshift(a, b):
    if isinstance(a, int) and isinstance(b, int) and a and b >= 64:
        raise BudgetError(f"int arithmetic on traced sizes ({a} << {b}) leaves 64 bits; a program loaded from a "
                          "file may not compute such sizes")
    return _bounded(a << b, "<<")


def _mul(a, b):
    for seq, n in ((a, b), (b, a)):
        if isinstance(seq, (list, tuple, str)) and isinstance(n, int) and len(seq) * n > MAX_REPEATED_LIST:
            raise BudgetError(f"repeating a list of {len(seq)} items {n} times on traced sizes; a program loaded "
                              f"from a file may build lists of at most {MAX_REPEATED_LIST} items")
    return _bounded(a * b, "*")


# operator symbol (as a call target names it, ``op:**``) -> checked function of (left, right)
INT_OPS = SimpleNamespace(pow=_pow, lshift=_lshift, mul=_mul)
SYMBOLS = {"**": "pow", "<<": "lshift", "*": "mul"}
assert set(SYMBOLS.values()) <= set(vars(INT_OPS)) and _mul(3, 4) == operator.mul(3, 4)


_CALL = threading.local()   # elements of the tensors the current call of a loaded program received


def enter_call(*inputs) -> None:
    """Called first by a loaded program's root method (when some op of it has a size check): the
    inputs' elements, which raise the budget of every check of this call."""
    _CALL.elements = sum(t.numel() for t in inputs if hasattr(t, "numel"))


def _largest_tensor(args: dict) -> int:
    best = 0
    for v in args.values():
        if isinstance(v, (list, tuple)):
            for x in v:
                if hasattr(x, "numel"):
                    best = max(best, x.numel())
        elif hasattr(v, "numel"):
            best = max(best, v.numel())
    return best


def size_check(op: str, sizer, file_elements: int, where: str):
    """The function generated code calls with an op's bound arguments before the op runs."""

    def check(args: dict) -> None:
        try:
            n = sizer(args)
        except ValueError as e:   # arguments the kernel would trust wrongly (op_sizes.rnn)
            raise GuardError(f"{op} at {where}: {e}; this program (loaded from a file) cannot run on these "
                             "inputs") from None
        if n is None or n <= file_elements:
            return
        limit = max(file_elements, CALL_FACTOR * max(_largest_tensor(args), getattr(_CALL, "elements", 0)))
        if n > limit:
            raise BudgetError(f"{op} at {where} would allocate {n if n < 10 ** 30 else 'more than 10^30'} elements, "
                              f"more than this program loaded from a file may allocate ({limit}: at least a fixed "
                              f"multiple of the file's size, or {CALL_FACTOR} x the call's inputs or the op's largest tensor argument)")

    return check
