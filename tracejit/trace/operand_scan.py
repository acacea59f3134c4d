"""A traced size as the operand of an operator whose other operand's own C arithmetic reads it without asking.

``0.5 * n``, ``1.0 / x.shape[-1]``, ``self.scale ** n``, ``3.5 < n``, ``True + n``, ``[0.0] * n``, ``n * [0.0]``,
``Fraction(1, 2) * n``, ``n in (3.0, 4.0)``: CPython runs the other operand's method first (a ``TracedInt`` is an int, not a float / bool /
complex subclass, so its reflected method is not tried first; or it answers NotImplemented to a list), and that method
reads the int's digits directly. No Python hook runs for an operator, so nothing was recorded or guarded: the program
kept the trace's number at every size, silently (hunt28).

Found in the source instead, as index_reads.py finds list indices: each ``BinOp``, ``Compare`` (membership in a list
or tuple: its items are the left operands of ``==``) and ``AugAssign`` on the
lines a user frame ran since its last event whose operands are side-effect free (names, attributes, numbers,
arithmetic, ``.size()``, ``.shape[...]``, ``len()``) has its operands evaluated again in that frame; where a traced
size meets an operand that does not ask it (anything but a tensor, an int, a ``TracedInt`` / ``TracedFloat``, and a
float to the RIGHT of the size, which ``TracedInt``'s own methods record), the size is guarded ``== value`` at the
line. The program then re-traces or fails a named guard at another size. ``n * 0.5``, ``n / 2``, ``n < 3.5`` (the size
on the left) stay recorded or guarded as before (symbolic.py, symfloat.py).

An operand that is tensor math (``0.5 * (a + b)``: a name, attribute or subscript base among its operands holds a
tensor) is not evaluated again: the tracer records tensor arithmetic, and computing it twice would add dead ops.

An operand that is a call (``math.sqrt(d) * n``, ``self.scale() * n``, ``np.float32(1.5) * n``, a lambda's or a
comprehension's ``f(k) * k``) is not run again unless it is a side-effect free number function (``math.*``, ``abs``,
``min``, ``max``, ...); a torch call declared to give a tensor (``torch.relu(x) * n``, ``x.sum(-1) * n``, a module's
call) is tensor math. Any other call's result is unknown (operand_calls.py): a traced size on its RIGHT is guarded at
the line (default-deny: too strict where the call gave an int; hunt30). On its left, the size's own method runs first
and records or guards (symbolic._declined).

Known limit (index_reads.py's): a name reassigned between the operator and the next event is read with its new
value (a guard the trace did not need: too strict, never wrong).
"""
from __future__ import annotations

import ast
import contextlib
import numbers

import torch

from ..ir import SourceLoc
from . import operand_calls
from .provenance import TracedFloat
from .symbolic import TracedInt

NODES = (ast.BinOp, ast.Compare, ast.AugAssign)
_SEQUENCES = (list, tuple, str, bytes, bytearray)


def _asks(other, size_on_left: bool, op: ast.AST) -> bool:
    """Does ``size <op> other`` (or ``other <op> size``) go through methods that record or guard the size?"""
    if isinstance(other, (torch.Tensor, TracedInt, TracedFloat)) or type(other) is int:
        return True
    if size_on_left and isinstance(other, float) and not isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return True   # TracedInt's own + - * / // % ** and comparisons take a float
    if isinstance(other, numbers.Number) or type(other).__module__ == "numpy":
        return False   # bool, float (size on the right), complex, Fraction, Decimal, numpy scalars and arrays
    return not (isinstance(other, _SEQUENCES) and isinstance(op, ast.Mult))   # repetition reads the count


def _pairs(node):
    """``(left expr, op, right expr)`` of each operator application in ``node``."""
    if isinstance(node, ast.BinOp):
        yield node.left, node.op, node.right
    elif isinstance(node, ast.AugAssign):   # the target read back (a Load of the same name / attribute)
        target = node.target
        load = ast.Name(target.id, ast.Load()) if isinstance(target, ast.Name) else \
            ast.Attribute(target.value, target.attr, ast.Load())
        yield ast.copy_location(load, target), node.op, node.value
    else:
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            yield left, op, right
            left = right


_checked: dict[int, tuple] = {}   # id(node) -> (node, its pairs worth evaluating): the trees stay alive (index_reads)


def _worth(node, safe) -> list:
    """The pairs of ``node`` with a side-effect free operand, not both constants, not identity tests."""
    hit = _checked.get(id(node))
    if hit is None or hit[0] is not node:
        pairs = []
        if not isinstance(node, ast.AugAssign) or isinstance(node.target, (ast.Name, ast.Attribute)):
            pairs = [(a, op, b) for a, op, b in _pairs(node)
                     if not isinstance(op, (ast.Is, ast.IsNot))
                     and not (isinstance(a, ast.Constant) and isinstance(b, ast.Constant)) and _scannable(a, b, safe)]
        hit = _checked[id(node)] = (node, pairs)
    return hit[1]


def _scannable(a, b, safe) -> bool:
    """Both operands side-effect free, or one that may hold a traced size (not a constant) beside a call."""
    sa, sb = safe(a), safe(b)
    return sa and sb or sa and not isinstance(a, ast.Constant) or sb and not isinstance(b, ast.Constant)


_TENSOR = torch.empty(0)   # stands for an operand that is tensor math: recorded by the tracer, never evaluated again


def _atoms(expr):
    """The operands of the arithmetic in ``expr``: names, attributes, subscripts, calls, constants."""
    if isinstance(expr, ast.BinOp):
        yield from _atoms(expr.left)
        yield from _atoms(expr.right)
    elif isinstance(expr, ast.UnaryOp):
        yield from _atoms(expr.operand)
    else:
        yield expr


_UNKNOWN = object()   # stands for an operand that is a call the scan does not run again (operand_calls.py)


def _value(expr, frame, eval_, safe):
    """``expr`` evaluated again in ``frame``, or ``_TENSOR`` where one of its operands is a tensor (``0.5 * (a + b)``:
    not computed and recorded a second time), or ``_UNKNOWN`` where one is a call that is not run again and is not
    known to give a tensor (``math.sqrt(d)`` is run again: operand_calls.PURE)."""
    unknown = False
    for atom in _atoms(expr):
        if not safe(atom):
            how = operand_calls.kind(atom, frame, safe) if isinstance(atom, ast.Call) else operand_calls.UNKNOWN
            if how == operand_calls.TENSOR:
                return _TENSOR
            unknown = unknown or how == operand_calls.UNKNOWN
            continue
        if isinstance(atom, ast.Subscript) and isinstance(eval_(atom.value, frame), torch.Tensor):
            return _TENSOR   # (x[0]: an index op, not evaluated again)
        if not isinstance(atom, ast.Constant) and isinstance(eval_(atom, frame), torch.Tensor):
            return _TENSOR
    return _UNKNOWN if unknown else eval_(expr, frame)


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_enclosing: dict[int, tuple] = {}   # id(operator node) -> (node, its comprehension): the trees stay alive


def note_comprehensions(tree) -> None:
    """For index_reads' parse of a file: remember the comprehension each operator node sits in."""
    for comp in ast.walk(tree):
        if isinstance(comp, _COMPREHENSIONS):
            for node in ast.walk(comp):
                if isinstance(node, NODES):
                    _enclosing.setdefault(id(node), (node, comp))


class _ItemFrame:
    """``frame`` seen with a comprehension's target bound to one item (what its own frame held then)."""

    def __init__(self, frame, bound: dict):
        self.f_globals, self.f_code = frame.f_globals, frame.f_code
        self.f_locals = {**frame.f_locals, **bound}


def _frames(frame, node, eval_, safe):
    """``frame``, and where ``node`` sits in a one-``for`` comprehension over a short side-effect free iterable
    (``[2.5 * k for k in (n, 1)]``), ``frame`` with the target bound to each item: the comprehension's own frame is
    gone (or holds the last item) when the scan runs, and no event happens inside it (hunt30)."""
    yield frame
    hit = _enclosing.get(id(node))
    if hit is None or hit[0] is not node or len(hit[1].generators) != 1:
        return
    gen = hit[1].generators[0]
    if not safe(gen.iter) or not isinstance(gen.target, (ast.Name, ast.Tuple)):
        return
    names = [gen.target] if isinstance(gen.target, ast.Name) else list(gen.target.elts)
    if not all(isinstance(t, ast.Name) for t in names):
        return
    try:
        items = eval_(gen.iter, frame)
    except Exception:  # noqa: BLE001  (the comprehension's own frame: its iterable is `.0`)
        return
    if not isinstance(items, (list, tuple, range)) or len(items) > 64:
        return
    for item in items:
        values = (item,) if len(names) == 1 else tuple(item) if isinstance(item, (list, tuple)) else ()
        if len(values) == len(names):
            yield _ItemFrame(frame, {t.id: v for t, v in zip(names, values)})


def check(scanner, frame, node, eval_, safe, guard_index) -> None:
    """Guard each traced size of ``node`` (one of ``NODES``) that meets an operand that does not ask it."""
    for seen in _frames(frame, node, eval_, safe):
        _check_in(scanner, frame, seen, node, eval_, safe, guard_index)


def _check_in(scanner, frame, seen, node, eval_, safe, guard_index) -> None:
    """``check`` with the operands evaluated in ``seen`` (``frame`` or a comprehension item's view of it)."""
    for left_expr, op, right_expr in _worth(node, safe):
        try:
            with contextlib.ExitStack() as stack:
                if scanner.tracer not in torch.overrides._get_current_function_mode_stack():
                    stack.enter_context(scanner.tracer)
                left = _value(left_expr, seen, eval_, safe)
                right = _TENSOR if left is _TENSOR else _value(right_expr, seen, eval_, safe)
        except Exception:  # noqa: BLE001  (a name not bound yet, a line that did not run)
            continue
        if isinstance(op, (ast.In, ast.NotIn)):   # ``n in (3.0, 4.0)``: ``item == n`` runs with the item on the left
            items = right if isinstance(right, (list, tuple)) and len(right) <= 64 else ()
            first = _UNKNOWN if right is _UNKNOWN else next((i for i in items if not _asks(i, False, ast.Eq())), _TENSOR)
            op, left, right = ast.Eq(), first, left
        for size, other, on_left in ((left, right, True), (right, left, False)):
            if size is _TENSOR or other is _TENSOR or not isinstance(size, TracedInt):
                continue
            if other is _UNKNOWN:   # a call not run again: its method runs first where it is on the left
                if on_left:
                    continue   # the size's own method runs first: it records, or guards (symbolic._declined)
            elif _asks(other, on_left, op):
                continue
            if not scanner.first_guard(size, id(node), id(left_expr)):
                continue
            loc = SourceLoc(frame.f_code.co_filename, node.lineno, frame.f_code.co_name)
            beside = "a call's result that may be a float" if other is _UNKNOWN else f"a {type(other).__name__}"
            guard_index(scanner.tracer, size, f"an operand of `{type(op).__name__}` beside {beside} "
                        "(whose own arithmetic reads the number without asking it)", loc)
