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

Known limits (index_reads.py's): operands that are calls of other functions (``f(x) * n``) are not evaluated again, so
``math.sqrt(d) * n`` is not seen; a name reassigned between the operator and the next event is read with its new
value (a guard the trace did not need: too strict, never wrong).
"""
from __future__ import annotations

import ast
import contextlib
import numbers

import torch

from ..ir import SourceLoc
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
    """The pairs of ``node`` with side-effect free operands, not both constants, not identity or membership tests."""
    hit = _checked.get(id(node))
    if hit is None or hit[0] is not node:
        pairs = []
        if not isinstance(node, ast.AugAssign) or isinstance(node.target, (ast.Name, ast.Attribute)):
            pairs = [(a, op, b) for a, op, b in _pairs(node)
                     if not isinstance(op, (ast.Is, ast.IsNot))
                     and not (isinstance(a, ast.Constant) and isinstance(b, ast.Constant)) and safe(a) and safe(b)]
        hit = _checked[id(node)] = (node, pairs)
    return hit[1]


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


def _value(expr, frame, eval_):
    """``expr`` evaluated again in ``frame``, or ``_TENSOR`` where one of its operands is a tensor (``0.5 * (a + b)``:
    not computed and recorded a second time)."""
    for atom in _atoms(expr):
        if isinstance(atom, ast.Subscript) and isinstance(eval_(atom.value, frame), torch.Tensor):
            return _TENSOR   # (x[0]: an index op, not evaluated again)
        if not isinstance(atom, ast.Constant) and isinstance(eval_(atom, frame), torch.Tensor):
            return _TENSOR
    return eval_(expr, frame)


def check(scanner, frame, node, eval_, safe, guard_index) -> None:
    """Guard each traced size of ``node`` (one of ``NODES``) that meets an operand that does not ask it."""
    for left_expr, op, right_expr in _worth(node, safe):
        try:
            with contextlib.ExitStack() as stack:
                if scanner.tracer not in torch.overrides._get_current_function_mode_stack():
                    stack.enter_context(scanner.tracer)
                left = _value(left_expr, frame, eval_)
                right = _TENSOR if left is _TENSOR else _value(right_expr, frame, eval_)
        except Exception:  # noqa: BLE001  (a name not bound yet, a line that did not run)
            continue
        if isinstance(op, (ast.In, ast.NotIn)):   # ``n in (3.0, 4.0)``: ``item == n`` runs with the item on the left
            items = right if isinstance(right, (list, tuple)) and len(right) <= 64 else ()
            op, left, right = ast.Eq(), next((i for i in items if not _asks(i, False, ast.Eq())), _TENSOR), left
        for size, other, on_left in ((left, right, True), (right, left, False)):
            if size is _TENSOR or other is _TENSOR or not isinstance(size, TracedInt) or _asks(other, on_left, op):
                continue
            key = (id(frame), id(node), id(left_expr), int.__int__(size))
            if key in scanner.done:
                continue
            scanner.done.add(key)
            loc = SourceLoc(frame.f_code.co_filename, node.lineno, frame.f_code.co_name)
            guard_index(scanner.tracer, size, f"an operand of `{type(op).__name__}` beside a "
                        f"{type(other).__name__} (whose own arithmetic reads the number without asking it)", loc)
