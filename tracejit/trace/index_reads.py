"""A traced size used as a list / tuple / dict index: ``table[x.shape[-1] - 1]``, ``tuple_[n]``.

CPython reads an int subclass's digits without asking it when it indexes a list, a tuple,
a str or a range (``__index__`` is never called), so the index cannot be intercepted where
it is used. Two rules make such a read a guard ``index == value`` at the user's line:

- ``nn.ModuleList`` / ``nn.Sequential`` / ``nn.ParameterList`` indexing (``self.layers[n]``)
  goes through a Python helper of torch's, which a stand-in watches;
- every other subscript is found in the source: at each event the trace records (an op, a
  size read), the lines of the innermost user frame run since its previous event are looked
  up in the file's syntax tree; a subscript of a non-tensor container whose index expression
  is side-effect free (names, attributes, numbers, arithmetic, ``.size()``, ``.shape[...]``,
  ``len()``) is evaluated again in that frame, and each traced size it gives is guarded.

The same scan finds the numpy callables numpy_reads.py cannot replace (``arr.reshape(n, -1)``, ``zeros(n)``
bound before the trace): numpy_calls.py.

When a user frame returns (frame_returns.py, a profile hook while tracing), the lines it ran
since its last event are scanned too: ``SCALES[n]`` in a helper that records no op, or a
subscript on the last lines of ``forward``, is guarded.

Known limits: at a return, only frames whose locals hold a traced size (or a short tuple /
list of them) are scanned, so an index read only through an attribute or a global
(``self.n``) after the frame's last event is not seen; under a C-level profiler (cProfile)
the return scan is off; a name reassigned between the subscript and the next event is read
with its new value (the guard is then one the trace did not rely on: too strict, never wrong).
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import linecache
import sys
import threading

import torch
from torch import nn

from ..ir import SourceLoc
from . import c_readers, numpy_calls, operand_scan, patches, stdlib_calls
from .source import _TORCH_DIR, _skipped
from .symbolic import TracedInt, get_tracer

_SAFE_CALLS = {"size", "dim", "numel", "len"}
_SAFE_NODES = (ast.Name, ast.Attribute, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Subscript, ast.Slice, ast.Tuple,
               ast.List, ast.Load, ast.operator, ast.unaryop, ast.Call)
_SUSPENDS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_trees: dict[str, dict[int, list[ast.Subscript]] | None] = {}
class _OwnedLock:
    """A lock that knows whether this thread holds it: code the collector or a finalizer runs while this thread
    parses (a gc callback making a C call, which frame_returns' hook reports) must not wait for it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._owner = None

    def __enter__(self):
        self._lock.acquire()
        self._owner = threading.get_ident()
        return self

    def __exit__(self, *exc):
        self._owner = None
        self._lock.release()

    def held_here(self) -> bool:
        return self._owner == threading.get_ident()


# CPython 3.11's AST conversion keeps its recursion depth per interpreter, not per thread: two threads
# parsing or compiling at once fail with "AST constructor recursion depth mismatch"
AST_LOCK = _OwnedLock()


def _subscripts_by_line(filename: str):
    """line -> subscripts and calls with arguments that start on it, for a source file (None: no source)."""
    if filename not in _trees:
        lines = linecache.getlines(filename)
        table: dict[int, list[ast.Subscript]] | None = None
        try:
            with AST_LOCK:
                tree = ast.parse("".join(lines)) if lines else None
        except (SyntaxError, ValueError):
            tree = None
        if tree is not None:
            operand_scan.note_comprehensions(tree)
            table = {}
            for node in ast.walk(tree):
                if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) or \
                        isinstance(node, ast.Call) and (node.args or node.keywords) or \
                        isinstance(node, operand_scan.NODES):   # calls: numpy_calls.py; operators: operand_scan.py
                    table.setdefault(node.lineno, []).append(node)
        _trees[filename] = table
    return _trees[filename]


def _formats(node: ast.AST) -> bool:
    """``"%d" % n`` / ``b"%d" % (a, n)``: str's ``%`` reads an int subclass's digits without asking it."""
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
        and isinstance(node.left.value, (str, bytes))


def _safe(expr: ast.AST) -> bool:
    for node in ast.walk(expr):
        if not isinstance(node, _SAFE_NODES):
            return False
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name not in _SAFE_CALLS or node.keywords:
                return False
    return True


_candidates: dict[int, tuple] = {}


def _candidate(sub: ast.Subscript) -> bool:
    """A subscript worth evaluating again (an index made of numbers only holds no traced size)."""
    hit = _candidates.get(id(sub))
    if hit is None or hit[0] is not sub:
        ok = _container_expr(sub.value) and _safe(sub.slice) and any(
            isinstance(n, (ast.Name, ast.Call)) for n in ast.walk(sub.slice))
        hit = _candidates[id(sub)] = (sub, ok)
    return hit[1]


def _container_expr(expr: ast.AST) -> bool:
    """Names and attribute chains are looked up again; a text constant (``"0123"[n]``) and a call of a named
    callee (``tuple(t)[n]``: never called again, its callee decides: _c_container) are containers too."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, (str, bytes, tuple))
    if isinstance(expr, ast.Call):
        return numpy_calls._callee_expr(expr.func)
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name)


def _c_container(call: ast.Call, frame) -> bool:
    """Does ``call`` (a subscript's container) make a Python sequence: its callee is C code that is not
    torch's or numpy's (``tuple``, ``range``, ``sorted``, ``memoryview``)? Looked up, never called again."""
    try:
        fn = numpy_calls._lookup(call.func, frame)
    except Exception:  # noqa: BLE001  (a name not bound yet)
        return False
    return c_readers.c_callable_outside_torch(fn)


_compiled: dict[int, tuple] = {}   # id(expr) -> (expr, code): the trees in _trees stay alive


def _eval(expr: ast.AST, frame):
    hit = _compiled.get(id(expr))
    if hit is None or hit[0] is not expr:
        with AST_LOCK:
            hit = _compiled[id(expr)] = (expr, compile(ast.Expression(body=expr), "<tracejit index read>", "eval"))
    code = hit[1]
    return eval(code, frame.f_globals, dict(frame.f_locals))   # noqa: S307  (whitelisted syntax, see _safe)


def _holds_traced_int(values) -> bool:
    for v in values:
        if isinstance(v, TracedInt) or isinstance(v, (tuple, list)) and len(v) < 16 and any(
                isinstance(i, TracedInt) for i in v):
            return True
    return False


def _traced_ints(obj):
    if isinstance(obj, TracedInt):
        yield obj
    elif isinstance(obj, slice):
        for part in (obj.start, obj.stop, obj.step):
            yield from _traced_ints(part)
    elif isinstance(obj, tuple):
        for part in obj:
            yield from _traced_ints(part)


class IndexScanner:
    """Per trace: which line of each live user frame was scanned last."""

    def __init__(self, tracer):
        self.tracer = tracer
        self.last: dict[int, tuple] = {}   # id(frame) -> (frame, last line scanned)
        self.done: set = set()               # (size's graph value, AST node ids) already guarded: first_guard
        self.busy = False

    def event(self) -> None:
        """Called when the trace records something: scan the innermost user frame's new lines."""
        if self.busy:
            return
        frame = _innermost_user_frame()
        if frame is not None:
            self._scan(frame)

    def returning(self, frame) -> None:
        """A user frame returns (frame_returns.py): scan its lines after its last event."""
        if self.busy:
            return
        if _holds_traced_int(frame.f_locals.values()):   # a size read on these lines would be an event
            self._scan(frame)
        if not frame.f_code.co_flags & _SUSPENDS:   # a generator's frame comes back after a yield
            self.last.pop(id(frame), None)

    def numpy_call(self, frame, fn=None) -> None:
        """``frame`` (a user frame) is about to call a numpy C callable ``fn`` (frame_returns.py): guard what it
        passes."""
        if self.busy or AST_LOCK.held_here():   # inside this thread's own parse: a gc callback's call, not forward's
            return
        self.busy = True
        try:
            numpy_calls.check_at_call(self, frame, _subscripts_by_line(frame.f_code.co_filename), _eval, _safe,
                                      guard_index, fn)
        finally:
            self.busy = False

    def stdlib_call(self, frame) -> None:
        """``frame``, a standard-library Python function, was just called by a user frame (frame_returns.py):
        guard the traced sizes it was given (stdlib_calls.py)."""
        if self.busy or AST_LOCK.held_here():
            return
        self.busy = True
        try:
            stdlib_calls.check_call(self, frame, guard_index)
        finally:
            self.busy = False

    def first_guard(self, ti: TracedInt, *site) -> bool:
        """Is this the first guard of traced size ``ti`` at ``site`` (ids of AST nodes: the parsed trees keep them
        alive) in this trace? Keyed by the size's graph value, which its graph keeps alive, never by the frame: a
        frame's id is taken by a later call once it is gone (the second ``get_same_padding(w)`` of timm's MaxViT
        then lost its guard, whenever the allocator gave its frame the first one's address), and two sizes of one
        value at one line are two guards."""
        value = self.tracer._int_value(ti)
        if value is None:
            return True   # (guard_index guards nothing: not a size of this trace)
        key = (id(value),) + site
        if key in self.done:
            return False
        self.done.add(key)
        return True

    def _scan(self, frame) -> None:
        if AST_LOCK.held_here():
            return
        self.busy = True   # (parsing runs Python code, whose returns must not come back here)
        try:
            self._scan_lines(frame)
        finally:
            self.busy = False

    def _scan_lines(self, frame) -> None:
        table = _subscripts_by_line(frame.f_code.co_filename)
        line = frame.f_lineno
        seen = self.last.get(id(frame))
        if seen is not None and seen[0] is frame and seen[1] == line:
            return
        start = frame.f_code.co_firstlineno if seen is None or seen[0] is not frame else seen[1] + 1
        if start > line:   # a loop went back: this line again
            start = line
        self.last[id(frame)] = (frame, line)
        if not table:
            return
        for lineno in range(start, line + 1):
            for node in table.get(lineno, ()):
                if _formats(node):
                    self._check_format(frame, node)
                elif isinstance(node, operand_scan.NODES):
                    operand_scan.check(self, frame, node, _eval, _safe, guard_index)
                elif isinstance(node, ast.Call):
                    numpy_calls.check(self, frame, node, _eval, _safe, guard_index)
                else:
                    self._check(frame, node)

    def _check(self, frame, sub: ast.Subscript) -> None:
        if not _candidate(sub):
            return
        try:
            if isinstance(sub.value, ast.Call):
                if not _c_container(sub.value, frame):
                    return
                container = None
            else:
                container = _eval(sub.value, frame)
                if isinstance(container, (torch.Tensor, type)) or not hasattr(type(container), "__getitem__"):
                    return   # recorded by the tracer, a type annotation, or a line that did not run (None[...])
            tracer = self.tracer
            if tracer in torch.overrides._get_current_function_mode_stack():
                index = _eval(sub.slice, frame)
            else:   # inside the mode's handler: record the index expression again under it
                with tracer:
                    index = _eval(sub.slice, frame)
        except Exception:  # noqa: BLE001  (a name not bound yet, a comprehension variable: not this read)
            return
        loc = SourceLoc(frame.f_code.co_filename, sub.lineno, frame.f_code.co_name)
        for ti in _traced_ints(index):
            if not self.first_guard(ti, id(sub)):
                continue
            guard_index(self.tracer, ti, f"used as an index of a {type(container).__name__ if container is not None else 'sequence'}", loc)


    def _check_format(self, frame, node: ast.BinOp) -> None:
        """``"%d" % n``: each traced size among the right operand's values is guarded at the line."""
        if not _safe(node.right):
            return
        try:
            with contextlib.ExitStack() as stack:
                if self.tracer not in torch.overrides._get_current_function_mode_stack():
                    stack.enter_context(self.tracer)
                values = _eval(node.right, frame)
        except Exception:  # noqa: BLE001  (a name not bound yet)
            return
        loc = SourceLoc(frame.f_code.co_filename, node.lineno, frame.f_code.co_name)
        for ti in numpy_calls.traced_ints(values):
            if self.first_guard(ti, id(node)):
                guard_index(self.tracer, ti, "formatted by `%` (str reads the number without asking it)", loc)


def guard_index(tracer, ti: TracedInt, how: str, loc) -> None:
    """Guard ``ti == its value`` at ``loc``, with a ledger entry."""
    if tracer._int_value(ti) is None:
        return
    value = int.__int__(ti)
    tracer.ledger.add("size", f"a traced size was {how}: the trace fixes it to {value}", loc, value)
    tracer.guards.size(ti, how, value, loc)


def _innermost_user_frame():
    f = sys._getframe(2)
    while f is not None:
        if not _skipped(f.f_code.co_filename):
            return None if f.f_code.co_filename.startswith(_TORCH_DIR) else f
        f = f.f_back
    return None


def _outside_torch_location():
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if not _skipped(name) and not name.startswith(_TORCH_DIR):
            return SourceLoc(name, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return None


def _module_index_stand_in(original):
    """``ModuleList._get_abs_string_index`` & co.: a traced index is guarded at the user's line."""
    def stand_in(self, *args):
        tracer = get_tracer()
        idx = args[-1]
        if tracer is not None and tracer.frames and isinstance(idx, TracedInt):
            guard_index(tracer, idx, f"used as an index of a {type(self).__name__}", _outside_torch_location())
        return original(self, *args)
    stand_in.__name__ = original.__name__
    stand_in.__doc__ = original.__doc__
    return stand_in


for _owner, _name in ((nn.ModuleList, "_get_abs_string_index"), (nn.Sequential, "_get_item_by_idx"),
                      (nn.ParameterList, "_get_abs_string_index")):
    if _name in vars(_owner):
        patches.register(_owner, _name, _module_index_stand_in)
