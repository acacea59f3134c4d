"""dtype / device read in Python: recorded when they only flow into calls, guarded otherwise.

``torch.dtype`` cannot be subclassed, so ``if x.dtype == torch.float16:`` cannot be intercepted
where it compares. Instead, when user code reads ``x.dtype`` / ``x.device``, the syntax of the
reading function decides (the file is parsed once with ``ast``):

- the read is an argument of a call (``torch.ones(n, dtype=x.dtype)``, ``.to(x.dtype)``,
  ``torch.finfo(x.dtype)``, ``x.new_zeros(..., device=x.device)``) to torch, to a Tensor method,
  or to a Python function whose matching parameter is itself only passed on to such calls;
- or it is assigned to local names (``input_dtype = x.dtype``, ``dtype, device = x.dtype,
  x.device``) whose every use is such an argument:

then device/dtype-relative capture (provenance.py) records it and nothing is guarded. Any other
use (a comparison, ``in``, ``is``, a branch test, ``x.device.type``, ``x.dtype.is_floating_point``,
a dict key, a return, an attribute store, a function tracejit cannot read) guards
``str(x.dtype) == "torch.float32"`` (resp. ``str(x.device)``) at the line of the read.
``x.is_floating_point()``, ``x.is_complex()``, ``x.is_signed()``, ``x.element_size()`` and
``x.itemsize`` guard the dtype; ``x.is_cuda`` / ``is_cpu`` / ``is_meta`` and ``x.get_device()``
the device. Reads inside torch's own code are not analysed (they stay as recorded), except those dtype methods, which
torch's code branches on too (``F._canonical_mask``: a float mask is added, a bool one filled): guarded there as well.
"""
from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping
import linecache
import sys

import torch

from .index_reads import AST_LOCK
from .source import _TORCH_DIR, _skipped, user_location
from ..ir import SourceLoc

DTYPE_METHODS = {"is_floating_point", "is_complex", "is_signed", "element_size", "itemsize"}
DEVICE_METHODS = {"get_device"}
DEVICE_PROPERTIES = {"is_cuda", "is_cpu", "is_meta", "is_mps", "is_xpu"}
_OPAQUE_CALLS = {"str", "repr", "print", "format", "hash", "id", "isinstance", "getattr", "bool", "int", "len", "type",
                 "setattr", "issubclass", "dict", "set", "frozenset"}
_MAX_DEPTH = 4
# torch functions of dtypes whose answer is not recorded (no tensor goes in): a dtype read passed to one is guarded
_DTYPE_ANSWERS = tuple(f for f in (getattr(torch, "promote_types", None), getattr(torch, "can_cast", None)) if f)
_files: dict[str, ast.Module | None] = {}
_functions: dict[tuple, tuple | None] = {}


def _tree(filename: str):
    if filename not in _files:
        try:
            with AST_LOCK:
                _files[filename] = ast.parse("".join(linecache.getlines(filename)) or "\n")
        except (SyntaxError, ValueError):
            _files[filename] = None
    return _files[filename]


def _function(code):
    """(the function's ast node, its parent map) for a code object, or None."""
    key = (code.co_filename, code.co_firstlineno, code.co_name)
    if key not in _functions:
        found = None
        tree = _tree(code.co_filename)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name and (
                    node.lineno == code.co_firstlineno or
                    (node.decorator_list and node.decorator_list[0].lineno == code.co_firstlineno)):
                found = node
                break
        if found is not None:
            parents = {id(c): p for p in ast.walk(found) for c in ast.iter_child_nodes(p)}
            _functions[key] = (found, parents)
        else:
            _functions[key] = None
    return _functions[key]


_INDEX: dict[int, tuple] = {}   # id(function node) -> (node, {(attr, line): [Attribute]}, {name: [Name loads]})


def _index(fn_node) -> tuple[dict, dict]:
    """The function's attribute reads by (name, line) and its name loads by name, each list in ``ast.walk``
    order: one walk per function (a walk per property read was 15% of tracing a tiny T5). ``_functions`` keeps
    the nodes alive."""
    hit = _INDEX.get(id(fn_node))
    if hit is None or hit[0] is not fn_node:
        attributes, loads = {}, {}
        for n in ast.walk(fn_node):
            if isinstance(n, ast.Attribute):
                attributes.setdefault((n.attr, n.lineno), []).append(n)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                loads.setdefault(n.id, []).append(n)
        hit = _INDEX[id(fn_node)] = (fn_node, attributes, loads)
    return hit[1], hit[2]


def reading_frame(depth: int = 2):
    """The frame that read the property: the first outside tracejit; None inside torch's own code."""
    f = sys._getframe(depth)
    while f is not None and _skipped(f.f_code.co_filename) and not f.f_code.co_filename.startswith(_TORCH_DIR):
        f = f.f_back
    if f is None or f.f_code.co_filename.startswith(_TORCH_DIR):
        return None
    return f


def why_guard(frame, prop: str) -> str | None:
    """None when every ``.prop`` read on the frame's line only flows into calls; else what uses it."""
    fn = _function(frame.f_code)
    if fn is None:
        return "read outside a function tracejit can parse"
    node, parents = fn
    line = frame.f_lineno
    reads = _index(node)[0].get((prop, line), [])
    if not reads:
        return f"the .{prop} read could not be located in the source"
    for r in reads:
        why = _use(r, node, parents, frame.f_globals, frame.f_locals, 0)
        if why is not None:
            return why
    return None


def _use(expr, fn_node, parents, globals_, locals_, depth) -> str | None:
    if depth > _MAX_DEPTH:
        return "passed on too many times to follow"
    p = parents.get(id(expr))
    if isinstance(p, ast.Call) and expr in p.args:
        return _call_use(p, p.args.index(expr), None, fn_node, parents, globals_, locals_, depth)
    if isinstance(p, ast.keyword):
        call = parents.get(id(p))
        return _call_use(call, None, p.arg, fn_node, parents, globals_, locals_, depth)
    targets = _assigned_names(expr, p, parents)
    if targets is not None:
        for name in targets:
            for u in _index(fn_node)[1].get(name, []):
                why = _use(u, fn_node, parents, globals_, locals_, depth + 1)
                if why is not None:
                    return why
        return None
    return f"used in Python code ({type(p).__name__.lower()}: `{_text(p)}`)"


def _assigned_names(expr, p, parents):
    """``name = expr`` or ``a, b = expr1, expr2``: the plain local names that receive ``expr``."""
    if isinstance(p, ast.Assign) and p.value is expr and all(isinstance(t, ast.Name) for t in p.targets):
        return [t.id for t in p.targets]
    if isinstance(p, ast.Tuple):
        gp = parents.get(id(p))
        if isinstance(gp, ast.Assign) and gp.value is p and len(gp.targets) == 1 and \
                isinstance(gp.targets[0], ast.Tuple) and len(gp.targets[0].elts) == len(p.elts):
            target = gp.targets[0].elts[p.elts.index(expr)]
            return [target.id] if isinstance(target, ast.Name) else None
    return None


def _call_use(call, position, keyword, fn_node, parents, globals_, locals_, depth) -> str | None:
    func = call.func
    if isinstance(func, ast.Name) and func.id in _OPAQUE_CALLS:
        return f"passed to {func.id}()"
    if isinstance(func, ast.Attribute) and hasattr(torch.Tensor, func.attr) and _is_tensor_or_unknown(func.value,
                                                                                                     globals_, locals_):
        return None   # a Tensor method (x.to, x.new_zeros, ...)
    target = _resolve(func, globals_, locals_)
    if target is _UNKNOWN and isinstance(func, ast.Name):   # assigned later in the function (a dispatch table)
        target = _assigned_later(func.id, fn_node, globals_, locals_)
    if target in _DTYPE_ANSWERS:   # their answer is a plain dtype / bool that the trace would freeze
        return f"passed to torch.{target.__name__}(), whose answer is a plain Python value"
    module = getattr(target, "__module__", None) or ""
    if module.startswith(("torch", "tracejit")) or target in (torch.finfo, torch.iinfo):
        return None
    inner = inspect.unwrap(getattr(target, "__func__", target)) if callable(target) else None
    code = getattr(inner, "__code__", None)
    if code is None or code.co_filename.startswith(_TORCH_DIR):
        return None if code is not None else f"passed to `{_text(func)}`, which tracejit cannot read"
    fn = _function(code)
    if fn is None:
        return f"passed to `{_text(func)}`, which tracejit cannot read"
    params = [a.arg for a in fn[0].args.posonlyargs + fn[0].args.args + fn[0].args.kwonlyargs]
    if hasattr(target, "__self__") and params:
        params = params[1:]   # a bound method: self is not in the call
    name = keyword if keyword is not None else (params[position] if position < len(params) else None)
    rest = fn[0].args.kwarg
    if keyword is not None and name not in params and rest is not None and not any(
            isinstance(n, ast.Name) and n.id == rest.arg for n in ast.walk(fn[0])):
        return None   # swallowed by a **kwargs the callee never reads
    if name is None or name not in params:
        return f"passed to `{_text(func)}` as an argument tracejit cannot follow"
    callee_globals = getattr(inner, "__globals__", {})
    for u in _index(fn[0])[1].get(name, []):
        why = _use(u, fn[0], fn[1], callee_globals, {}, depth + 1)
        if why is not None:
            return why
    return None


def _assigned_later(name: str, fn_node, globals_, locals_):
    """The one object every ``name = <table>[<key>]`` / ``name = <a.b>`` of the function gives now."""
    found = _UNKNOWN
    for node in ast.walk(fn_node):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
            if isinstance(value, ast.Subscript):
                table = _resolve(value.value, globals_, locals_)
                key = _resolve(value.slice, globals_, locals_, plain_getattr=True)   # (a config's property)
                try:
                    obj = table[key] if isinstance(table, Mapping) and key is not _UNKNOWN else _UNKNOWN
                except (KeyError, TypeError):
                    obj = _UNKNOWN
            else:
                obj = _resolve(value, globals_, locals_)
            if obj is _UNKNOWN or (found is not _UNKNOWN and obj is not found):
                return _UNKNOWN
            found = obj
    return found


def _is_tensor_or_unknown(expr, globals_, locals_) -> bool:
    obj = _resolve(expr, globals_, locals_)
    return obj is _UNKNOWN or isinstance(obj, torch.Tensor)


_UNKNOWN = object()


def _resolve(expr, globals_, locals_, plain_getattr: bool = False):
    """The object a Name / attribute chain names in the frame (no calls), or _UNKNOWN."""
    if isinstance(expr, ast.Constant):
        return expr.value
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return _UNKNOWN
    scope = [locals_, globals_, vars(__builtins__) if not isinstance(__builtins__, dict) else __builtins__]
    obj = next((s[expr.id] for s in scope if expr.id in s), _UNKNOWN)
    for attr in reversed(parts):
        if obj is _UNKNOWN:
            return obj
        try:
            static = not plain_getattr and not isinstance(obj, torch.nn.Module)
            obj = inspect.getattr_static(obj, attr) if static else getattr(obj, attr)
        except AttributeError:
            return _UNKNOWN
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
    return obj


def _text(node) -> str:
    try:
        return ast.unparse(node)[:80]
    except Exception:  # noqa: BLE001
        return type(node).__name__


# ---- the guards -----------------------------------------------------------------------------------
def guard(tracer, t, prop: str, why: str, depth: int = 3, torch_too: bool = False) -> None:
    """Guard ``str(t.<prop>) == <now>`` at the user's line (``prop``: dtype or device); ``torch_too``: also when
    torch's own code reads it (at the user's line that called torch)."""
    if not isinstance(t, torch.Tensor) or not tracer.frames:
        return
    frame = reading_frame(depth)
    if frame is None and not torch_too:
        return
    loc = SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name) if frame is not None else \
        user_location(depth)
    if id(t) not in tracer.frame.env and (id(t) in tracer.param_names or not tracer._known_outside(t, tracer.frame)):
        # a tensor made from constants has a fixed dtype / device; a parameter or buffer this frame has not
        # used yet changes them only with the module (``.to()``), and looking it up here would bind it twice
        return
    with torch._C.DisableTorchFunction():
        now = str(t.dtype if prop == "dtype" else t.device)
    what = f"the tensor's {prop} ({now}) was {why}"
    tracer.ledger.add(prop, f"the trace relies on the {prop} {now}: it was {why}", loc, now, warn=False)
    tracer.guards.add(prop, prop, (tracer.value_of(t),), now, now, what, loc)


def on_property(tracer, t, prop: str) -> None:
    """``t.dtype`` / ``t.device`` read by user code: guard unless it only flows into calls."""
    frame = reading_frame(3)
    if frame is None:
        return
    why = why_guard(frame, prop)
    if why is not None:
        guard(tracer, t, prop, why, depth=4)


def on_method(tracer, name: str, args) -> None:
    """``t.is_floating_point()`` & co.: a Python answer that depends on the dtype / device."""
    if not args or not isinstance(args[0], torch.Tensor):
        return
    prop = "device" if name in DEVICE_METHODS or name in DEVICE_PROPERTIES else "dtype"
    # torch's own code branches on these too (F._canonical_mask: a float mask is added, a bool one filled with
    # -inf; hunt27: traced with a float key_padding_mask, a bool one answered differently, silently): guarded
    guard(tracer, args[0], prop, f"read by {name}", depth=4, torch_too=name in DTYPE_METHODS)
