r"""Module-level globals the user's code read while tracing become ``global`` guards.

A traced program holds the values forward computed from a global (``x * SCALE``, ``if USE_BIAS:``,
``torch.zeros(SIZES[0])``); eager reads the global again at every call. outer_state.py already looks at every
user function forward calls (not torch's, tracejit's, the standard library's or an installed package's) and
remembers the globals its code names. Of those, each one the code loads as a global (``LOAD_GLOBAL``, not an
attribute that happens to share the name) whose value is plain data (support/global_guards.py: numbers,
strings, None, small tuples / lists / dicts / sets of them) gets a guard, first in the root method's graph, that
compares the global's value at call time with the traced one: a live program traces again when it changed
(eager's answer), an optimized one built from a loaded file raises GuardError naming the line that read it.

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
import reprlib
import sys
from functools import lru_cache

from ..ir import GUARD, Node, SourceLoc
from ..support.global_guards import guardable

KIND = "global"


@lru_cache(maxsize=4096)
def _global_loads(code) -> dict:
    """name -> first line at which ``code`` loads it as a global (``LOAD_GLOBAL``; ``LOAD_NAME`` in a class body)."""
    out: dict = {}
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
            line = ins.positions.lineno if ins.positions is not None else None
            out.setdefault(ins.argval, line or code.co_firstlineno)
    return out


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def _short(value) -> str:
    return _REPR.repr(value)


def _module_of(g: dict) -> str | None:
    name = g.get("__name__")
    mod = sys.modules.get(name) if isinstance(name, str) else None
    return name if mod is not None and getattr(mod, "__dict__", None) is g else None


def guard_nodes(outer) -> list:
    """One ``global`` guard per global read (module docstring), in (module, name) order."""
    found = {}
    for g, name, codes in outer.globals_read():
        if name.startswith("__"):
            continue
        reads = [(c, _global_loads(c)[name]) for c in codes if name in _global_loads(c)]
        module = _module_of(g) if reads else None
        value = guardable(g[name]) if module is not None else None
        if value is None:
            continue
        code, line = reads[0]
        where = SourceLoc(code.co_filename, line, code.co_name)
        found[(module, name)] = Node(GUARD, "", (), attrs={
            "kind": KIND, "test": KIND, "expected": value, "seen": value, "module": module, "name": name,
            "what": f"global `{name}` of module {module} was {_short(g[name])} when traced",
            "line": linecache.getline(code.co_filename, line).strip()},
            source=where, effectful=True)
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
