r"""Module-level globals the user's code read while tracing become ``global`` guards.

A traced program holds the values forward computed from a global (``x * SCALE``, ``if USE_BIAS:``,
``torch.zeros(SIZES[0])``); eager reads the global again at every call. outer_state.py already looks at every
user function forward calls (not torch's, tracejit's, the standard library's or an installed package's) and
remembers the globals its code names. Of those, each one the code loads as a global (``LOAD_GLOBAL``, not an
attribute that happens to share the name) whose value is plain data (support/global_guards.py: numbers,
strings, None, small tuples / lists / dicts / sets of them) gets a guard, first in the root method's graph, that
compares the global's value at call time with the traced one: a live program traces again when it changed
(eager's answer), an optimized one built from a loaded file raises GuardError naming the line that read it.

Plain data read off a global through the user's own modules and classes (``settings.SCALE``,
``Defaults.EPS``, ``settings.Defaults.EPS``: a chain of ``LOAD_ATTR`` after the global, each step a module or
class of the user's files, the value in its own ``__dict__``) is guarded the same way (attribute ``owner``: the
class's qualified name).

Not guarded: globals forward itself changes (outer_state.py refuses those), tensors (captures), modules,
functions and classes (code), other objects, containers over ``MAX_ITEMS`` items, globals of code without a
module in ``sys.modules`` (``exec`` with a dict of its own), and everything with
``allow_frozen_python_state=True`` (the caller accepts the values the trace froze). A saved file keeps no
``global`` guard: it is loaded where the user's modules need not exist (serialize/encode.py); the ledger keeps
what each global was.

>>> import sys, types, warnings, torch, tracejit
>>> settings = sys.modules["settings"] = types.ModuleType("settings")   # a module of the user's
>>> exec(compile("SCALE = 2.0\ndef scaled(x):\n    return x * SCALE", "settings.py", "exec"), settings.__dict__)
>>> traced = tracejit.trace(settings.scaled, torch.ones(2))
>>> [(n.attrs["name"], n.attrs["expected"]) for n in traced.graph.nodes if n.attrs.get("kind") == "global"]
[('SCALE', ['float', 2.0])]
>>> settings.SCALE = 3.0
>>> with warnings.catch_warnings(record=True):   # the guard fails: traced again, eager's answer
...     traced(torch.ones(2))
tensor([3., 3.])
"""
from __future__ import annotations

import dis
import linecache
import os
import reprlib
import sys
import types
from functools import lru_cache

from ..ir import GUARD, Node, SourceLoc
from ..support.global_guards import global_value, guardable
from .frame_returns import _is_user
from .outer_state import _installed_library

KIND = "global"
MAX_CHAIN = 4   # attributes followed off a global: settings.models.Defaults.EPS


@lru_cache(maxsize=4096)
def _loads(code) -> tuple:
    """``({name: line}, {(name, attribute, ...): line})``: the first line at which ``code`` loads each global
    (``LOAD_GLOBAL``; ``LOAD_NAME`` in a class body), and each chain of attributes read off a global
    (``settings.SCALE``, ``Defaults.EPS``, ``settings.Defaults.EPS``: the global, then ``LOAD_ATTR``s)."""
    names: dict = {}
    chains: dict = {}
    chain = None
    for ins in dis.get_instructions(code):
        if ins.opname == "CACHE":
            continue
        line = (ins.positions.lineno if ins.positions is not None else None) or code.co_firstlineno
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
            names.setdefault(ins.argval, line)
            chain = (ins.argval,)
        elif ins.opname == "LOAD_ATTR" and chain is not None and len(chain) <= MAX_CHAIN:
            chain += (ins.argval,)
            chains.setdefault(chain, line)
        else:
            chain = None
    return names, chains


def _global_loads(code) -> dict:
    return _loads(code)[0]


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def _short(value) -> str:
    return _REPR.repr(value)


def _module_of(g: dict) -> str | None:
    name = g.get("__name__")
    mod = sys.modules.get(name) if isinstance(name, str) else None
    return name if mod is not None and getattr(mod, "__dict__", None) is g else None


def _user_module(obj) -> bool:
    """Is ``obj`` a module of the user's own code, imported under its name (``import settings``)?"""
    file = getattr(obj, "__file__", None)
    return isinstance(obj, types.ModuleType) and isinstance(file, str) and sys.modules.get(obj.__name__) is obj \
        and _is_user(file) and not _installed_library(file)


def _user_class(obj) -> bool:
    """Is ``obj`` a class the user's own module defines at its top level (found again by module and name)?"""
    if not isinstance(obj, type) or "<" in obj.__qualname__:
        return False
    module = sys.modules.get(obj.__module__)
    return module is not None and _user_module(module) and getattr(module, obj.__qualname__, None) is obj


def _guard(key, expected, value, what: str, code, line: int, **where) -> tuple:
    loc = SourceLoc(code.co_filename, line, code.co_name)
    return key, Node(GUARD, "", (), attrs={
        "kind": KIND, "test": KIND, "expected": expected, "seen": expected, **where,
        "what": f"{what} was {_short(value)} when traced", "line": linecache.getline(code.co_filename, line).strip()},
        source=loc, effectful=True)


def _attribute_guards(outer):
    """Guards on plain data read off a user module or class named by a global (``settings.SCALE``)."""
    for code, g in outer.forward_codes.items():
        for chain, line in _loads(code)[1].items():
            obj, attr = g.get(chain[0]), chain[-1]
            for step in chain[1:-1]:   # through user modules and classes only (no property runs here)
                obj = vars(obj).get(step) if _user_module(obj) or _user_class(obj) else None
            if attr.startswith("__") or not (_user_module(obj) or _user_class(obj)):
                continue
            holder = ".".join(chain[:-1])
            space = vars(obj)
            expected = guardable(space[attr]) if attr in space else None
            if expected is None:
                continue
            if isinstance(obj, type):
                yield _guard((obj.__module__, obj.__qualname__, attr), expected, space[attr],
                             f"class attribute `{obj.__qualname__}.{attr}`", code, line, module=obj.__module__,
                             owner=obj.__qualname__, name=attr)
            else:
                yield _guard((obj.__name__, "", attr), expected, space[attr], f"`{holder}.{attr}` (module "
                             f"{obj.__name__})", code, line, module=obj.__name__, name=attr)


def guard_nodes(outer) -> list:
    """One ``global`` guard per global read (module docstring), in (module, class, name) order."""
    found = {}
    for g, name, codes in outer.globals_read():
        if name.startswith("__"):
            continue
        reads = [(c, _global_loads(c)[name]) for c in codes if name in _global_loads(c)]
        module = _module_of(g) if reads else None
        expected = guardable(g[name]) if module is not None else None
        if expected is not None:
            key, node = _guard((module, "", name), expected, g[name], f"global `{name}` of module {module}", *reads[0],
                               module=module, name=name)
            found[key] = node
    for key, node in _attribute_guards(outer):
        found.setdefault(key, node)
    for var, loc in outer.env_reads.items():   # os.environ (env_reads.py): a str, or unbound
        expected = global_value(os.environ, var)
        found[("os", "environ", var)] = Node(GUARD, "", (), attrs={
            "kind": KIND, "test": KIND, "expected": expected, "seen": expected, "module": "os", "owner": "environ",
            "name": var, "what": f"environment variable {var!r} was "
                                f"{_short(os.environ[var]) if var in os.environ else 'unset'} when traced",
            "line": linecache.getline(loc.filename, loc.lineno).strip()}, source=loc, effectful=True)
    return [found[k] for k in sorted(found)]


def add_guards(outer, graph, allowed: bool, ledger) -> None:
    """Put the guards first in ``graph`` (none where the caller allowed frozen Python state), each noted in
    ``ledger`` (kind ``global``: what a saved file, which keeps no such guard, was traced with)."""
    if allowed:
        return
    nodes = guard_nodes(outer)
    for node in nodes:
        ledger.add(KIND, node.attrs["what"], node.source, node.attrs["expected"], warn=False)
    graph.nodes[:0] = nodes
