"""Functions held as module attributes, checked by identity in memory (hunt28), as captured tensor attributes are
(attribute_tensors.py).

``self.act = torch.relu``, ``self.f = functools.partial(torch.mul, other=2.0)``, ``self.score = lambda q, k: ...``:
forward calls what the attribute holds, and the trace records the ops that function ran. Rebinding the attribute
after the trace (``model.act = torch.tanh``) was missed silently (torch.jit.trace too): eager calls the new function,
the program kept the old one's ops, live, optimized and loaded. global_reads.py guards plain data only ("functions are
code"), python_state.py compares the model's state before and after forward, not after the trace.

Now each public attribute of a module of the traced hierarchy that holds a plain function (a Python function or
lambda, a builtin, a bound method, a ``functools.partial``) is held with that object in the graph's
``memory_checks`` (support/global_guards.IdentityChecks): a live or optimized program traces again when the attribute
is bound to another object, one without its original raises GuardError naming the attribute. Modules, tensors and
classes are not functions here (submodules and tensors have checks of their own). Attributes the user's forward code
assigns (``self.fn = ...`` in forward: python_state.py decides about those) are left out, as are private names.
Module-level names the user's code loads that hold a function (``ACT = torch.relu``; global_reads.py's globals, which
it guards only when they hold plain data) are held the same way, with the line that read the name.
A file keeps no such check (a file is a snapshot); ``allow_frozen_python_state=True`` skips them.
"""
from __future__ import annotations

import functools
import linecache
import types

from ..ir import GUARD, Node, SourceLoc
from ..support.global_guards import IdentityChecks
from .global_reads import KIND, _attribute_writes, _global_loads, _module_of

FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.BuiltinMethodType,
             functools.partial)


def add_checks(outer, graph, module, allowed: bool) -> None:
    """Add to ``graph.memory_checks`` the function attributes of ``module``'s hierarchy (module docstring)."""
    if allowed:
        return
    items = list(_global_functions(outer))
    if module is not None:
        items += _attribute_functions(outer, module)
    if items:
        graph.memory_checks = (graph.memory_checks or IdentityChecks(())).joined(items)


def _global_functions(outer):
    """Module-level names the user's code loads (``LOAD_GLOBAL``) that hold a function: ``ACT = torch.relu``
    (outer_state.py does not watch functions: its ``forward_codes`` and their loads are read here)."""
    seen = set()
    for code, g in list(outer.forward_codes.items()):
        for name, line in _global_loads(code).items():
            value = g.get(name)
            if not isinstance(value, FUNCTIONS) or name.startswith("__") or (id(g), name) in seen:
                continue
            seen.add((id(g), name))
            module = _module_of(g)
            where = f"module {module}" if module is not None else f"code run by exec ({code.co_filename})"
            yield g, name, value, Node(GUARD, "", (), attrs={
                "kind": KIND, "test": KIND, "expected": True, "seen": True, "name": name,
                "line": linecache.getline(code.co_filename, line).strip(),
                "what": f"global `{name}` of {where} held the function {_name(value)} when traced, and eager calls "
                        "what the name holds at each call"},
                source=SourceLoc(code.co_filename, line, code.co_name), effectful=True)


def _attribute_functions(outer, module) -> list:
    """Public attributes of the hierarchy's modules that hold a function and that the user's code does not assign."""
    written = set()
    for code in outer.forward_codes:
        written |= _attribute_writes(code)
    items = []
    for path, m in module.named_modules(remove_duplicate=True):
        space = vars(m)
        for attr, value in list(space.items()):
            if attr.startswith("_") or attr in written or not isinstance(value, FUNCTIONS):
                continue
            where = f"`{path}.{attr}`" if path else f"`self.{attr}`"
            node = Node(GUARD, "", (), attrs={
                "kind": KIND, "test": KIND, "expected": True, "seen": True, "name": attr, "line": "",
                "what": f"{where} (an attribute of a {type(m).__name__}) held the function {_name(value)} when "
                        "traced, and eager calls what the attribute holds at each call"},
                source=None, effectful=True)
            items.append((space, attr, value, node))
    return items


def _name(value) -> str:
    if isinstance(value, functools.partial):
        return f"functools.partial({_name(value.func)}, ...)"
    return getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or type(value).__name__
