"""numpy callables the stand-ins of numpy_reads.py cannot reach, found in the source (issue #20).

numpy reads an int subclass's digits without asking it, and two kinds of numpy callables cannot be replaced
while tracing: the methods of numpy's own types (``arr.reshape(n, -1)``, ``arr.repeat(n)``: C types, not
patchable) and numpy functions bound to another name before the trace started (``from numpy import zeros``
at import time, then ``zeros(n)`` in forward). Both are found the way index_reads.py finds subscripts: at each
event, a call on the lines the innermost user frame ran since its last event whose callee is a name or an
attribute chain (``zeros``, ``arr.reshape``, ``self.table.take``) is looked at; when the callee, looked up
again in that frame, is numpy's (a bound method of a numpy object, or a function or type numpy defines, not one
of numpy_reads' stand-ins, which guard for themselves) and an argument is side-effect free (index_reads._safe),
the argument is evaluated again and each traced size in it is guarded ``== value`` at the call's line.

A receiver that is itself a call (``np.ones(12).reshape(n, -1)``) is never evaluated again (a call may have
effects): it is numpy's when its callee, looked up again, is a numpy callable (or a method of such a call's
result, ``np.ones(12).astype(f).reshape(n)``).

Any receiver, at the call: while a thread traces, frame_returns.py's profile hook sees every C function a user
frame is about to call (``c_call``); when it is numpy's (a method of a numpy array or scalar, or a function of a
numpy module: is_numpy_c_callable, decided by the run-time callee, not by the source's shape), the call running
at that instruction is found by its source span and its arguments are guarded as above. So ``arrs[0].reshape(n)``,
``self.cfg.table.reshape(n)``, ``np.ones(3).reshape(n)``, ``[a.reshape(n) for a in arrs]`` and
``(lambda a: a.reshape(n))(arr)`` are guarded at their line. Limits: an argument with other calls than ``size``
/ ``dim`` / ``numel`` / ``len`` is not evaluated again; under a C-level profiler (cProfile) the hook is off and
only the scan above runs.
"""
from __future__ import annotations

import ast
import builtins
import types

import torch

from ..ir import SourceLoc
from . import c_readers
from .symbolic import TracedInt

_candidates: dict[int, tuple] = {}


def _callee_expr(expr: ast.AST) -> bool:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name) or isinstance(expr, ast.Constant) and expr is not None and not isinstance(
        expr, ast.Name) and isinstance(expr.value, (str, bytes))   # "a".ljust(n): a C reader (c_readers.py)


def candidate(call: ast.Call, safe) -> bool:
    """A call worth looking at: a named callee and an argument that may hold a traced size."""
    hit = _candidates.get(id(call))
    if hit is None or hit[0] is not call:
        ok = (_callee_expr(call.func) or _method_of_call(call.func)) and any(
            _arg_candidate(a, safe) for a in _arguments(call))
        hit = _candidates[id(call)] = (call, ok)
    return hit[1]


def _method_of_call(func: ast.AST) -> bool:
    """``<call>.method``: a method of what a named call returned (``np.ones(12).reshape``)."""
    while isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
        func = func.value.func
    return _callee_expr(func)


def _numpy_result(expr: ast.AST, frame) -> bool:
    """Is ``expr`` (a call) made by numpy: a numpy callable's result, or a method of one's (looked up without
    calling anything again)? numpy's functions and methods give numpy objects (arrays, scalars, lists)."""
    if not isinstance(expr, ast.Call):
        return False
    if _callee_expr(expr.func):
        fn = _lookup(expr.func, frame)
        inner = getattr(fn, "__wrapped__", fn)   # numpy_reads' stand-in stands for a numpy function
        return is_numpy_callable(inner)
    return isinstance(expr.func, ast.Attribute) and _numpy_result(expr.func.value, frame)


def _arguments(call: ast.Call) -> list:
    return [a.value if isinstance(a, ast.Starred) else a for a in call.args] + [k.value for k in call.keywords]


def _read_arguments(call: ast.Call, frame) -> list:
    """The arguments whose traced sizes the callee may read: all, except the iterated first ones of a builtin in
    c_readers.ITERATED_FIRST called by its own name (not shadowed in the frame)."""
    func = call.func
    skip = c_readers.ITERATED_FIRST.get(func.id, 0) if isinstance(func, ast.Name) else 0
    if skip and (func.id in frame.f_locals or func.id in frame.f_globals) or \
            any(isinstance(a, ast.Starred) for a in call.args[:skip]):
        skip = 0
    return _arguments(call)[skip:]


def _arg_candidate(arg: ast.AST, safe) -> bool:
    return safe(arg) and any(isinstance(n, (ast.Name, ast.Call, ast.Attribute)) for n in ast.walk(arg))


def _lookup(expr: ast.AST, frame):
    """A name or an attribute chain looked up in ``frame`` (no ``eval``, no copy of its locals): the callees of
    every call the scan meets are looked up, most of them not numpy's."""
    attrs = []
    while isinstance(expr, ast.Attribute):
        attrs.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Constant):
        obj = expr.value
        for attr in reversed(attrs):
            obj = getattr(obj, attr)
        return obj
    name = expr.id
    local = frame.f_locals
    if name in local:
        obj = local[name]
    elif name in frame.f_globals:
        obj = frame.f_globals[name]
    else:
        obj = getattr(builtins, name)
    for attr in reversed(attrs):
        obj = getattr(obj, attr)
    return obj


def _from_numpy(module) -> bool:
    return isinstance(module, str) and (module == "numpy" or module.startswith("numpy."))


def is_numpy_callable(obj) -> bool:
    """Is ``obj`` a numpy callable that reads its int arguments without asking them (no stand-in)?"""
    if getattr(obj, "__wrapped__", None) is not None:
        return False   # numpy_reads' stand-in: it guards its arguments itself
    owner = getattr(obj, "__self__", None)
    if owner is not None and not isinstance(owner, (types.ModuleType, type)):
        return _from_numpy(type(owner).__module__)   # arr.reshape, np.float64(2).__pow__
    return _from_numpy(getattr(obj, "__module__", None))   # zeros bound at import, np.float32


def traced_ints(obj, depth: int = 0):
    if isinstance(obj, TracedInt):
        yield obj
    elif isinstance(obj, (tuple, list)) and depth < 4 and len(obj) < 64:
        for item in obj:
            yield from traced_ints(item, depth + 1)
    elif isinstance(obj, slice):
        for part in (obj.start, obj.stop, obj.step):
            yield from traced_ints(part, depth + 1)


def check(scanner, frame, call: ast.Call, evaluate, safe, guard) -> None:
    """Guard the traced sizes ``call`` passes to a numpy callable (``evaluate(expr, frame)`` looks up again)."""
    if not candidate(call, safe):
        return
    try:
        if _callee_expr(call.func):
            callee = _lookup(call.func, frame)
            if not callable(callee) or not (is_numpy_callable(callee) or c_readers.reads_digits(callee)):
                return
        elif not _numpy_result(call.func.value, frame):
            return
    except Exception:  # noqa: BLE001  (a name not bound yet: a line that did not run)
        return
    _guard_arguments(scanner, frame, call, evaluate, safe, guard)


# ---- at the call: the callee seen at run time (frame_returns.py's profile hook, ``c_call``) ------------------
_NUMPY_OWNERS: dict[type, bool] = {}
_NUMPY_FUNCTIONS: dict = {}   # a module's C function -> numpy's? (they live as long as their module)
_positions: dict = {}   # code object -> its instructions' source spans


def is_checked_c_callable(fn) -> bool:
    """Is ``fn``, a C function a user frame is about to call, one whose int arguments are guarded: numpy's, or
    another C reader (c_readers.py)?"""
    return is_numpy_c_callable(fn) or c_readers.reads_digits(fn)


def is_numpy_c_callable(fn) -> bool:
    """Is ``fn``, a C function about to be called, numpy's: a method of a numpy object (whatever expression
    gave the object) or a function of a numpy module? Asked for every C call while tracing: a dict lookup by
    the receiver's type (by the function itself for a module's functions: ``len``, ``isinstance``)."""
    owner = type(getattr(fn, "__self__", None))
    if owner is not types.ModuleType:   # (never a key of _NUMPY_OWNERS: frame_returns' hook asks it first)
        hit = _NUMPY_OWNERS.get(owner)
        if hit is None:
            hit = _NUMPY_OWNERS[owner] = _from_numpy(getattr(owner, "__module__", None))
        return hit
    hit = _NUMPY_FUNCTIONS.get(fn)
    if hit is None:
        hit = _NUMPY_FUNCTIONS[fn] = _from_numpy(getattr(fn, "__module__", None))
    return hit


def call_at(frame, table):
    """The ``ast.Call`` whose call instruction ``frame`` is running (its source span), or None."""
    code = frame.f_code
    spans = _positions.get(code)
    if spans is None:
        spans = _positions[code] = list(code.co_positions())
    at = frame.f_lasti // 2
    if not table or not 0 <= at < len(spans):
        return None
    line, end_line, col, end_col = spans[at]
    for node in table.get(line, ()):
        if isinstance(node, ast.Call) and (node.end_lineno, node.col_offset, node.end_col_offset) == (
                end_line, col, end_col):
            return node
    return None


def check_at_call(scanner, frame, table, evaluate, safe, guard, fn=None) -> None:
    """``frame`` calls a numpy C callable now (is_numpy_c_callable): guard the traced sizes among the call's
    side-effect-free arguments at its line. The receiver is never looked at again (``arrs[0].reshape(n)``,
    ``self.table.reshape(n)``, ``np.ones(3).reshape(n)``, a comprehension's or a lambda's ``a.reshape(n)``):
    the run time said whose the method is. A ``torch.Size`` receiver (``fn``: ``x.shape.numel()``, whose C code
    multiplies the sizes without asking them) has its own traced sizes guarded (hunt26)."""
    receiver = getattr(fn, "__self__", None)
    if type(receiver) is torch.Size:
        loc = SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        for ti in traced_ints(receiver):
            guard(scanner.tracer, ti, f"read by torch.Size.{fn.__name__}() (C code reads the numbers without "
                                      "asking them)", loc)
    call = call_at(frame, table)
    if call is not None and candidate_arguments(call, safe):
        _guard_arguments(scanner, frame, call, evaluate, safe, guard)


def candidate_arguments(call: ast.Call, safe) -> bool:
    return any(_arg_candidate(a, safe) for a in _arguments(call))


def _guard_arguments(scanner, frame, call: ast.Call, evaluate, safe, guard) -> None:
    tracer = scanner.tracer
    name = ast.unparse(call.func) if hasattr(ast, "unparse") else "numpy"
    loc = SourceLoc(frame.f_code.co_filename, call.lineno, frame.f_code.co_name)
    for arg in _read_arguments(call, frame):
        if not _arg_candidate(arg, safe):
            continue
        try:
            if tracer in torch.overrides._get_current_function_mode_stack():
                value = evaluate(arg, frame)
            else:
                with tracer:
                    value = evaluate(arg, frame)
        except Exception:  # noqa: BLE001
            continue
        for ti in traced_ints(value):
            if not scanner.first_guard(ti, id(call)):
                continue
            guard(tracer, ti, f"passed to {name}() (numpy or other C code reads the number without asking it)", loc)
