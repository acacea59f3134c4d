"""Submodule methods a saved file leaves out (docs/FORMAT.md, module entry ``left_out``): ``save``'s side.

A submodule method whose trace froze a Python object that is not data (transformers' ``EncoderDecoderCache``
passed to a decoder layer as ``past_key_values``: the trace keeps it as a constant input) cannot be written
as a JSON program. It should not cost the user the whole file: the methods that call it get a copy of its
nodes in place of the call (its constant input is then no input of theirs), and the method itself is left out,
with a warning naming it and why. The loaded program answers its root methods as before; calling the left-out
method raises a LoadError saying why it is not in the file (serialize/left_out_stubs.py), never a different
answer. Only that SaveError (constants.NotDataError) leaves a method out, and only a submodule's: a root
method that cannot be saved is still a SaveError (default-deny), as is any other reason.
"""
from __future__ import annotations

import os
import sys
import warnings

from ..ir import Graph, map_values
from ..passes.graph_copy import copy_inputs, copy_nodes, empty_like
from . import encode
from .constants import NotDataError


class SavedMethods:
    """What the file holds of each module's methods: ``methods[path]`` the (name, graph) pairs to write (a
    caller of a left-out method: its copy with those calls inlined), ``left_out[path]`` the (name, reason) pairs
    left out, ``encoded`` the graph documents already made (by id of the graph written)."""

    def __init__(self):
        self.methods: dict[str, list] = {}
        self.left_out: dict[str, list] = {}
        self.encoded: dict[int, dict] = {}


def plan(program, kept: dict | None = None) -> SavedMethods:
    """The methods of ``program`` (a module Program) as the file holds them. Deepest modules first, so a
    method's callees are settled before it. ``kept``: ``{path: {method: reason}}`` a loaded program already
    left out (re-saved, the file says so again)."""
    out = SavedMethods()
    bad: dict[int, str] = {}   # id(a left-out method's graph) -> why
    alive = []                 # the graphs ``bad`` names, kept alive so their ids stay theirs
    for m in sorted(program.modules, key=lambda e: -len(e.path.split(".")) if e.path else 0):
        methods = []
        for name, reason in sorted((kept or {}).get(m.path, {}).items()):
            out.left_out.setdefault(m.path, []).append((name, reason))
        for name, original in m.methods:
            where = f"method {name!r} of {m.path or 'the root'}"
            graph = original
            if bad and _calls_any(graph, bad):
                graph = inlined(graph, lambda callee: id(callee) in bad)
            try:
                out.encoded[id(graph)] = encode.encode_graph(graph, where)
            except NotDataError as e:
                if not m.path:
                    raise
                reason = str(e)
                bad[id(original)] = reason
                alive.append(original)
                out.left_out.setdefault(m.path, []).append((name, reason))
                warnings.warn(f"tracejit.save: {m.path}.{name} is left out of the file ({reason}); the methods that "
                              f"call it hold its nodes, and calling it on the loaded program raises a LoadError",
                              stacklevel=_caller_level())
                continue
            methods.append((name, graph))
        out.methods[m.path] = methods
    return out


def inlined(graph: Graph, which) -> Graph:
    """A copy of ``graph`` whose submodule calls that ``which(callee graph)`` says yes to (at any depth) are
    replaced by the callee's nodes (passes/graph_copy.copy_nodes); the other calls stay calls."""
    out = empty_like(graph)
    env = copy_inputs(graph, out)
    copy_nodes(graph, out, env, "", inline=which)
    out.outputs = [map_values(o, lambda v: env[id(v)]) for o in graph.outputs]
    return out


def _calls_any(graph: Graph, bad: dict) -> bool:
    """Does ``graph`` call a graph ``bad`` names (its callees' own calls are settled in their copies)?"""
    return any(n.op == "tracejit::call_module" and id(graph.callees.get((n.attrs["path"], n.attrs["method"]))) in bad
               for n in graph.nodes)


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside tracejit (the user's ``tracejit.save`` line)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root + os.sep):
        frame, level = frame.f_back, level + 1
    return level
