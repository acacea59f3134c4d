"""Which attributes of ``self`` a module class's forward reads, from its source (for module_config.py).

module_config.py checks, on every call, the scalar settings of torch's and libraries' modules that a trace went
through: their forward (not the user's code, so not watched by the tracer) read them and the program froze the
values. Checking every public scalar attribute costs a call for settings no forward reads (``nn.Linear``'s
``in_features`` / ``out_features``: its forward reads ``weight`` and ``bias`` only; the five bench workloads' MLP
paid 0.85 us a call, 21%, for them). ``attributes_read(cls)`` reads the source of ``cls.forward`` and of each
method or property of ``self`` it reaches, and gives the names ``self.<name>`` appears with; None (every attribute
counts) where the source cannot tell: no source, ``self`` used other than as ``self.<name>`` (handed to a
function, aliased, iterated: anything could read any attribute), ``getattr`` / ``vars`` / ``__dict__``,
``super()``, or a forward set on the instance.

>>> from torch import nn
>>> sorted(attributes_read(nn.Linear))
['bias', 'weight']
>>> sorted(attributes_read(nn.LeakyReLU))
['inplace', 'negative_slope']
"""
from __future__ import annotations

import ast
import inspect
import textwrap

_CACHE: dict = {}
_OPAQUE = ("getattr", "setattr", "vars", "super", "delattr", "hasattr")


def attributes_read(cls) -> frozenset | None:
    """The attribute names ``cls``'s forward reads of ``self`` (through its methods and properties), or None."""
    if cls not in _CACHE:
        try:
            _CACHE[cls] = _read_from_source(cls)
        except Exception:  # noqa: BLE001  (a source inspect or ast cannot read: every attribute counts)
            _CACHE[cls] = None
    return _CACHE[cls]


def _read_from_source(cls) -> frozenset | None:
    names: set = set()
    todo, seen = ["forward"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        member = inspect.getattr_static(cls, name, None)
        fn = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if not inspect.isfunction(fn):
            return None
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(fn))))
        owned = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _OPAQUE:
                return None
            if isinstance(node, ast.Name) and node.id == "self" and id(node) not in owned:
                return None   # self handed on, aliased or iterated: anything may read any attribute
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                if node.attr == "__dict__":
                    return None
                names.add(node.attr)
                reached = inspect.getattr_static(cls, node.attr, None)
                if isinstance(reached, property) or inspect.isfunction(getattr(reached, "__func__", reached)):
                    todo.append(node.attr)
    return frozenset(names)
