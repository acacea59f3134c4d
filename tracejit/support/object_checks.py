"""Plain Python objects hanging off the traced modules (config objects): checked by the live program (hunt20 E).

``self.config.output_attentions`` on a dataclass, a ``SimpleNamespace``, a transformers ``PretrainedConfig``:
forward's branch follows the value at trace time, and a flag flipped on the original's config after the trace
gave the trace's answer silently (torch.jit's too). The config object is no part of the traced program (not a
module, parameter or buffer), so no guard node can read it. Instead, at the end of a trace, every non-module
object found in a traced module's ``__dict__`` (and the objects those hold, one level down) is snapshotted:
its plain attributes (bool, int, float, str, None, enums, and tuples of them) by name. The
generated code of the live program calls ``_tj_py_checks()`` first: a changed value raises GuardError, and the
traced object traces its original again (eager's answer) as for any failed guard.

What is snapshotted is every plain attribute of those objects, not only the ones forward read: a change to an
attribute forward never read retraces once (too strict, never wrong). Modules' own plain attributes are not
snapshotted (torch.jit's ScriptModule does not follow them either; hunt20's findings). A plain object held by a
module-level global that user code named while tracing (outer_state.py's watch: ``CFG.scale``) is checked the
same way, by its plain attributes; a global of plain data itself (``SCALE = 2.0``), a settings module's
attributes and environment variables are ``global`` guards (trace/global_reads.py, env_reads.py). A loaded program holds no such
objects: files do not save ``Graph.py_checks`` (the program is the model then).
"""
from __future__ import annotations

import enum
import math
import types

import torch
from torch import nn

from ..errors import GuardError
from ..ir import GUARD, Node

_PLAIN = (bool, int, float, str, type(None), enum.Enum)
_SKIP = (nn.Module, torch.Tensor, types.FunctionType, types.MethodType, types.BuiltinFunctionType, type,
         types.ModuleType)


def _plain(v, depth: int = 0) -> bool:
    if isinstance(v, float):
        return not math.isnan(v)
    if isinstance(v, _PLAIN):
        return True
    if depth < 2 and type(v) is tuple and len(v) <= 64:
        return all(_plain(x, depth + 1) for x in v)
    return False   # mutable containers are not compared: a spy list forward appends to (allowed with
    #                allow_frozen_python_state) would fail every call's check, and each retrace appends again


def _objects(value):
    """The plain Python object(s) ``value`` is, if any: an object with a ``__dict__`` that is not a module,
    tensor, function or class, and not torch's or tracejit's own."""
    if isinstance(value, _SKIP) or not hasattr(value, "__dict__") or not isinstance(vars(value), dict):
        return
    mod = type(value).__module__ or ""
    if mod.startswith(("torch", "tracejit")):
        return
    yield value


def snapshot(module: nn.Module) -> tuple:
    """``((path, object, keys, values), ...)``: the plain attributes of each plain object found in the modules'
    ``__dict__`` (and in those objects, one level down), each object once."""
    seen: set = set()
    out = []

    def visit(obj, path: str, depth: int):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        items = [(k, v) for k, v in list(vars(obj).items()) if _plain(v)]
        if items:
            out.append((path, type(obj).__name__, vars(obj), tuple(k for k, _ in items), tuple(v for _, v in items)))
        if depth < 1:
            for k, v in list(vars(obj).items()):
                for inner in _objects(v):
                    visit(inner, f"{path}.{k}", depth + 1)

    for name, m in module.named_modules():
        for key, value in list(vars(m).items()):
            if key.startswith("_") and key in ("_parameters", "_buffers", "_modules"):
                continue
            for obj in _objects(value):
                visit(obj, f"{name + '.' if name else ''}{key}", 0)
    return tuple(out)


def globals_read(found) -> tuple:
    """Entries for the plain objects (a config object: ``CFG.scale``) held by module globals user code named while
    tracing (``(globals dict, name)`` pairs from outer_state.OuterState.globals_read), by their plain attributes.
    A global of plain data itself (``SCALE = 2.0``) is a ``global`` guard (trace/global_reads.py), not an entry."""
    out = []
    seen: set = set()
    for g, name in found:
        if name not in g or _plain(g[name]):
            continue
        for obj in _objects(g[name]):
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            items = [(k, v) for k, v in list(vars(obj).items()) if _plain(v)]
            if items:
                out.append((f"{g.get('__name__', '?')}.{name}", type(obj).__name__, vars(obj),
                            tuple(k for k, _ in items), tuple(v for _, v in items)))
    return tuple(out)


def checker(entries: tuple):
    """``_tj_py_checks()`` for generated code: raises GuardError naming the first changed attribute."""
    def check():
        for path, kind, attrs, keys, values in entries:
            now = tuple(map(attrs.get, keys))   # (a deleted attribute reads None: its value then, if it was None)
            if now != values:
                key, was, seen = next((k, v, n) for k, v, n in zip(keys, values, now) if n != v)
                _fail(f"{path}.{key}", kind, was, seen)
    return check


def _fail(where: str, kind: str, was, now):
    what = f"`{where}` (of a {kind} the traced code read)"
    node = Node(GUARD, "", (), attrs={"kind": "python_object", "test": "python_object", "expected": was,
                                      "seen": was, "what": what, "line": ""}, effectful=True)
    now_text = repr(now)
    raise GuardError(f"forward: the trace read Python objects held by the modules, and {what} was {was!r} at the "
                     f"trace, now {now_text}. A traced object that holds its original traces it again; trace again "
                     "otherwise.", guard=node, expected=was, seen=now)
