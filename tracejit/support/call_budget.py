"""Budgets that hold when a program loaded from a file runs (docs/SECURITY.md, "call-time budgets").

Load-time checks see the traced sizes; at call time sizes follow the inputs and the ints the
program computes from them. So, in loaded programs only (a program traced in this process from
the user's own code is trusted), the generated code

- computes ``**``, ``<<`` and ``*`` on traced ints through ``INT_OPS``, which refuse a result
  beyond 64 bits before computing it (``size ** 10**18`` would otherwise run for ever);
- calls a size check before each op that can allocate more than its inputs (serialize/size_rules.py
  holds the op's size rule): the elements it is about to allocate must stay within
  max(ALLOC_FLOOR, ALLOC_PER_FILE_BYTE x file bytes, CALL_FACTOR x the elements of the call's
  input tensors): one budget for every op of the call, so growth step by step (64 ops each doubling
  a tensor) is held too; its multiply-adds (matmul and the other contractions) within WORK_FACTOR
  times that. Ops of several tensors are checked too (their broadcast or sum can outgrow each).
  The multiply-adds of the checked ops of one call are summed too, and held to TOTAL_WORK_FACTOR times one op's
  (a 5 KB file chaining legal 4096^3 products ran 1.4 s a product, without end: round 25's ``work_chain``).
  In a program whose ops could together pass that total (serialize/budget_plan.py: more than STATIC_STEPS
  element steps in all, each op's ``ops.step_work`` times its largest tensor, which the budget bounds), every op
  counts: ``work_count`` adds its step weight times the elements of its tensors before it runs, and each size
  check adds its step weight times the elements it makes (round 26: 20 ``sin`` of a 2^25 tensor took 1.9 s, a
  chain of them had no end).
  Every method of a program with such checks first records its inputs' elements (``enter_call``)
  when it is an entry point (called from outside the program's generated code; a submodule call
  inside a call keeps the outer budget); programs without checks pay nothing. ``over_budget`` also checks the traced sizes at load.

Either raises BudgetError naming the op and the source line that recorded it, before any work.
"""
from __future__ import annotations

import math
import operator
import sys
import threading
from types import SimpleNamespace

import torch
from torch import Tensor

from ..errors import BudgetError, GuardError

INT_BOUND = 2 ** 63
MAX_REPEATED_LIST = 65536
CALL_FACTOR = 64     # elements an op may make per element of its largest tensor argument
WORK_FACTOR = 4096   # multiply-adds an op may do per element it may make (a contraction of length 4096)
TOTAL_WORK_FACTOR = 8   # the checked contractions of one call may do, together, this many times what one op may
# the element steps (ops.step_work x elements) a program's ops may take in all, per element of the budget, before its
# calls count them one by one: half the total, so those left uncounted leave room for the counted contractions
STATIC_STEPS = TOTAL_WORK_FACTOR * WORK_FACTOR // 2


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
    if type(a) is int and type(b) is int:   # the common case (a size times a size): two 64-bit ints, then bounded
        r = a * b
        if -INT_BOUND <= r < INT_BOUND:
            return r
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


ALLOWANCE_FACTOR = 16     # a call may do this many times its traced example call's work (serialize/traced_work.py) ...
ALLOWANCE_FLOOR = 2 ** 31  # ... or this many multiply-adds (about 0.05 s on one core), whichever is more
CLAIM_FACTOR = 256         # a call of n input elements does at most ALLOWANCE_FACTOR x this x (its tensors' elements + n) x n


class Allowance:
    """The work one call of a method may do in all (``_total_work``), fixed at load (round 27; round 26's cap alone
    let a 5 KB file's call run about 20 s): the least of

    - ALLOWANCE_FACTOR x the work of its traced example call (``work``, computed at load from the traced shapes,
      never read from the file: serialize/traced_work.py), times the square of how much larger the call's inputs
      are than the traced ones (``shapes``: each dimension's growth over its traced size, multiplied; attention is
      quadratic in its length);
    - ``claim(n)``: ALLOWANCE_FACTOR x CLAIM_FACTOR x (the file's tensors' elements, ``weights``, + n) x n for the
      call's n input elements. It rests on the call's real inputs and the file's real tensors alone, so a file
      cannot raise it by claiming big traced shapes (a product by weights does weights x positions, a position
      at most an input element; attention n^2 x width);
    - the file's cap, TOTAL_WORK_FACTOR x WORK_FACTOR x max(``file_elements``, CALL_FACTOR x n) (sessions 25-26);

    and at least ALLOWANCE_FLOOR (within the cap). A file whose traced call alone passes ``claim`` of its traced
    inputs (its own example would be refused) is refused at load (serialize/budget_plan.BudgetPlan.allowance)."""

    __slots__ = ("work", "shapes", "file_elements", "weights", "made_of", "at_traced", "traced_n")

    def __init__(self, work: int, shapes: tuple, file_elements: int, weights: int):
        self.work, self.shapes, self.file_elements, self.weights = work, shapes, file_elements, weights
        self.made_of = ("allow", work, shapes, file_elements, weights)   # serialize/cached_methods.py records it
        # the limit of a call at exactly the traced shapes (most calls: the entry's test of the shapes, no sums)
        self.traced_n = sum(math.prod(s) for s in shapes)
        self.at_traced = min(self.claim(self.traced_n), max(ALLOWANCE_FLOOR, ALLOWANCE_FACTOR * work))

    def cap(self, n: int) -> int:
        """The file's total for a call of ``n`` input elements (session 25's bound)."""
        return TOTAL_WORK_FACTOR * WORK_FACTOR * max(self.file_elements, CALL_FACTOR * n)

    def claim(self, n: int) -> int:
        """The most work a call of ``n`` input elements may do by the file's tensors and ``n`` alone: ALLOWANCE_FACTOR
        x CLAIM_FACTOR x (``weights`` + n) x n, at least ALLOWANCE_FLOOR, at most the cap. A file whose traced call
        alone needs more (its own example would be refused) is refused at load."""
        return min(self.cap(n), max(ALLOWANCE_FLOOR, ALLOWANCE_FACTOR * CLAIM_FACTOR * (self.weights + n) * n))

    def limit(self, shapes: list, n: int) -> int:
        """The work a call may do in all whose tensor inputs have ``shapes`` (None for an argument that is no
        tensor) and ``n`` elements."""
        growth = 1.0
        traced_shapes = self.shapes
        for i, s in enumerate(shapes):
            if s is None:
                continue
            traced = traced_shapes[i] if i < len(traced_shapes) else ()
            if s == traced:
                continue
            if len(s) != len(traced):   # another rank (a direct call may pass anything): its elements' growth
                growth *= max(1.0, math.prod(s) / max(math.prod(traced), 1))
                continue
            for d, d0 in zip(s, traced):
                if d > d0:
                    growth *= d / d0
        traced_work = ALLOWANCE_FACTOR * self.work * growth * growth
        claim = self.claim(n)
        return claim if traced_work >= claim else max(ALLOWANCE_FLOOR, int(traced_work))


def enter_call(allow: Allowance, *inputs) -> None:
    """The first statement of every method of a loaded program that has size checks (root methods and
    submodule methods alike): every entry point into the program sets the budget of its call from
    the elements of *its own* inputs, so ``loaded.encoder.layer[0].forward(x)`` called directly is
    held to what ``x`` allows, not to the last root call's budget in this thread, and its work to the
    method's ``allow`` (Allowance).

    A call made from a loaded program's own generated code (a submodule call inside a call: its
    caller's globals hold this function) keeps the outer call's budget: its inputs are the call's
    intermediates, already within that budget, and counting them again would let each level of
    nesting raise the budget by CALL_FACTOR."""
    if sys._getframe(2).f_globals.get("_tj_budget_inputs") is enter_call:
        return
    n = 0
    for t in inputs:
        if isinstance(t, Tensor):   # a submodule method has no input checks: a direct call may pass anything
            n += t.numel()
    _CALL.elements, _CALL.work, _CALL.limit = n, 0, None   # (a direct call: rare) computed when first needed
    _CALL.pending = (allow, [t.shape if isinstance(t, Tensor) else None for t in inputs], n)


def enter_root(allow: Allowance, *inputs) -> None:
    """``enter_call`` for a root method: always an entry point (the file's calls name submodules only, and a
    module tree has no cycle), its inputs Tensors (its input checks ran first)."""
    n = 0
    for t in inputs:
        n += t.numel()
    _CALL.elements, _CALL.work = n, 0
    if n == allow.traced_n:   # most calls: the traced shapes (then the limit fixed at load)
        shapes = allow.shapes
        if len(inputs) == len(shapes):
            i = 0
            for t in inputs:
                if t.shape != shapes[i]:
                    break
                i += 1
            else:
                _CALL.limit = allow.at_traced
                return
    # other shapes: the limit is computed when an op first counts work (most calls of most programs: never)
    _CALL.limit = None
    _CALL.pending = (allow, [t.shape for t in inputs], n)


def _held(t) -> int:
    """The elements a tensor argument really holds: an expanded view ([1] -> [2**24]) holds its
    storage's, not its shape's, so a file cannot raise its own budget by expanding."""
    try:
        return min(t.numel(), t.untyped_storage().nbytes() // max(t.element_size(), 1))
    except (RuntimeError, TypeError, NotImplementedError):
        return t.numel()


def _largest_tensor(args: dict) -> int:
    best = 0
    for v in args.values():
        for x in (v if isinstance(v, (list, tuple)) else (v,)):
            if hasattr(x, "numel"):
                best = max(best, _held(x))
    return best


def _any_empty(args: dict) -> bool:
    """Does an argument (or an item of a list argument) hold an empty tensor? The scan of every size check
    (most find none, and then the arguments are used as they are): ``isinstance``, not ``hasattr`` (a failed
    ``hasattr`` on ``None`` or a float raises and catches an AttributeError), and a list whose first item is
    a number is skipped (the schema check types every list: an ``int[]`` or ``float[]`` holds no tensor)."""
    for v in args.values():
        if isinstance(v, Tensor):
            if not v.numel():
                return True
        elif v.__class__ in _SEQUENCES and v and v[0].__class__ not in _NUMBERS:
            for x in v:
                if isinstance(x, Tensor) and not x.numel():
                    return True
    return False


_SEQUENCES = (list, tuple)
_NUMBERS = (int, float, bool)


def _at_extent(v):
    """An empty tensor as a meta tensor of its extent (each 0 of its shape counted as 1; anything else as it is):
    an op that drops the zero dimension makes that many elements (a ``[2**28, 0]`` summed over dim 1), so
    the size rules count empty tensors at their extent (serialize/op_sizes_values.py)."""
    if isinstance(v, (list, tuple)):
        return type(v)(_at_extent(x) for x in v) if any(isinstance(x, Tensor) for x in v) else v
    if isinstance(v, Tensor) and v.numel() == 0 and v.dim() > 1:
        return torch.empty([max(int(s), 1) for s in v.shape], dtype=v.dtype, device="meta")
    return v


def _count(n: int) -> str:
    return str(n) if n < 10 ** 30 else "more than 10^30"


def over_budget(rule, args: dict, file_elements: int, call_elements: int | None = None) -> str | None:
    """Why an op with size rule ``rule`` (serialize/size_rules.py) and bound arguments ``args`` is over
    budget, or None. Elements within the budget, multiply-adds within WORK_FACTOR times it.

    At a call (``call_elements``: the elements of the call's input tensors) the budget is
    max(``file_elements``, CALL_FACTOR x ``call_elements``): the same for every op of the call, so a
    chain of ops that each double a tensor stops where the chain's product passes it, not where one
    step does. At load (``call_elements`` None, traced shapes) it is max(``file_elements``, CALL_FACTOR x
    the op's largest tensor argument): ops whose arguments can change are checked again at each call,
    the others' tensors are the file's own. Raises ValueError for arguments the kernel would trust
    wrongly (op_sizes.rnn, op_sizes_values.py). Empty tensors count at their extent (``_at_extent``)."""
    return _verdict(*_measure(rule, args), args, file_elements, call_elements)


def _measure(rule, args: dict) -> tuple:
    """(elements, multiply-adds) the op would make and compute (None where its rule does not say)."""
    # a reshape's rule reads its input's emptiness itself (empty_only: serialize/op_sizes_values.py); the
    # arguments are copied only when one is empty (most calls: none, and the scan is a few isinstance tests)
    sized = args if getattr(rule, "empty_only", None) or not _any_empty(args) else \
        {k: _at_extent(v) for k, v in args.items()}
    return rule.elements(sized), (rule.flops(sized) if rule.flops is not None else None)


def _verdict(n, work, args: dict, file_elements: int, call_elements: int | None) -> str | None:
    if (n is None or n <= file_elements) and (work is None or work <= WORK_FACTOR * file_elements):
        return None
    if call_elements is None:
        limit = max(file_elements, CALL_FACTOR * _largest_tensor(args))
        basis = "the op's largest tensor argument"
    else:
        limit = max(file_elements, CALL_FACTOR * call_elements)
        basis = "the call's input tensors"
    if n is not None and n > limit:
        return (f"would allocate {_count(n)} elements, more than this program loaded from a file may allocate "
                f"({limit}: at least a fixed multiple of the file's size, or {CALL_FACTOR} x {basis})")
    if work is not None and work > WORK_FACTOR * limit:
        return (f"would compute {_count(work)} multiply-adds, more than this program loaded from a file may "
                f"compute ({WORK_FACTOR * limit}: {WORK_FACTOR} per element it may allocate)")
    return None


_NO_ENTRY = object()


def call_limit() -> int | None:
    """The work the current (or last) call of a loaded program in this thread may do in all, or None when no entry
    point ran here (benches and tests read it)."""
    limit = getattr(_CALL, "limit", _NO_ENTRY)
    if limit is None:
        allow, shapes, n = _CALL.pending
        limit = _CALL.limit = allow.limit(shapes, n)
    return None if limit is _NO_ENTRY else limit


def _total_work(work: int, file_elements: int, call_elements: int) -> str | None:
    """Add an op's multiply-adds to its call's running total; why the total is over the call's allowance (set by
    its entry point: ``Allowance.limit``), or None."""
    total = getattr(_CALL, "work", 0) + work
    _CALL.work = total
    limit = getattr(_CALL, "limit", _NO_ENTRY)
    if limit is None:   # the entry point left it for the first op that counts (its inputs were not the traced shapes)
        allow, shapes, n = _CALL.pending
        limit = _CALL.limit = allow.limit(shapes, n)
    elif limit is _NO_ENTRY:   # no entry point ran in this thread: the file's total (default: the cap, never more)
        limit = TOTAL_WORK_FACTOR * WORK_FACTOR * max(file_elements, CALL_FACTOR * call_elements)
    if total <= limit:
        return None
    return (f"would bring this call's multiply-adds to {_count(total)}, more than the ops of one call of a program "
            f"loaded from a file may compute together ({int(limit)}: {ALLOWANCE_FACTOR} x its traced call's work, scaled by the "
            f"square of its inputs' growth over the traced sizes, at least {ALLOWANCE_FLOOR}, at most "
            f"{TOTAL_WORK_FACTOR} x what one op may; an op of elements counts each at its step weight, ops.step_work)")


def size_check(op: str, rule, file_elements: int, where: str, step: int = 0):
    """The function generated code calls with an op's bound arguments before the op runs. ``step``: in a program
    whose calls count every op's work (``work_count``), the op's step weight per element it makes."""

    def check(args: dict) -> None:
        call_elements = getattr(_CALL, "elements", 0)
        try:
            n, work = _measure(rule, args)
        except ValueError as e:   # arguments the kernel would trust wrongly (op_sizes.rnn)
            raise GuardError(f"{op} at {where}: {e}; this program (loaded from a file) cannot run on these "
                             "inputs") from None
        why = _verdict(n, work, args, file_elements, call_elements)
        amount = (work or 0) + (step * n if step and n else 0)
        if why is None and amount:
            why = _total_work(amount, file_elements, call_elements)
        if why is not None:
            raise BudgetError(f"{op} at {where} {why}")

    check.made_of = (op, rule, where, step)   # what serialize/code_cache.py records to make it again
    return check


def _broadcast_bound(tensors: list) -> int:
    """At least the elements of the broadcast of tensors of different shapes (each dim's largest size)."""
    dims: list[int] = []
    for t in tensors:
        shape = t.shape
        for i in range(1, len(shape) + 1):
            if i > len(dims):
                dims.append(shape[-i])
            elif shape[-i] > dims[i - 1]:
                dims[i - 1] = shape[-i]
    return math.prod(dims)


def tensor_elements(args: tuple, broadcast: bool = True) -> int:
    """The elements an op of tensor arguments ``args`` works through: its largest tensor, a list argument's
    tensors together (``cat``), the broadcast of tensors of different shapes (``[n, 1] + [1, m]``); without
    ``broadcast`` (an op whose size rule counts its multiply-adds: a convolution's input, weight and bias do not
    broadcast together) its largest tensor."""
    found = []
    listed = 0
    for a in args:
        if isinstance(a, Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            listed = max(listed, sum(x.numel() for x in a if isinstance(x, Tensor)))
    if not found:
        return listed
    first = found[0]
    if len(found) == 1 or all(t.shape == first.shape for t in found):
        return max(first.numel(), listed)
    if not broadcast:
        return max(max(t.numel() for t in found), listed)
    return max(_broadcast_bound(found), listed)


def work_count(op: str, step: int, file_elements: int, where: str, fixed: int = 0, broadcast: bool = True):
    """The function generated code calls, before an op of a program whose calls count every op's work, with the
    op's tensor arguments: adds ``step`` times the elements they hold (``tensor_elements``, with ``broadcast``),
    plus ``fixed`` (the work of an op of constant arguments, sized at load), to the call's total (``_total_work``)."""

    def count(*tensors) -> None:
        why = _total_work(step * tensor_elements(tensors, broadcast) + fixed, file_elements,
                          getattr(_CALL, "elements", 0))
        if why is not None:
            raise BudgetError(f"{op} at {where} {why}")

    count.made_of = ("work", op, step, where, fixed, broadcast)   # what serialize/code_cache.py records
    return count
