"""Inlining, a pass of its own (Graph -> Graph): one flat graph for the whole method.

Other passes work on flat graphs (``freeze`` runs this first; ``.inlined_graph``, the specializations,
the checker and the ONNX export read its result); copying a graph never inlines (passes/graph_copy.py).
"""
from __future__ import annotations

from ..ir import Graph, map_values
from .graph_copy import copy_inputs, copy_nodes, empty_like


def inline_calls(graph: Graph, prefix: str = "") -> Graph:
    """Return a new Graph where every ``tracejit::call_module`` is replaced by the callee's nodes.

    ``get_attr`` paths become relative to the outer graph's module, and node scopes record
    the submodule path each node came from. The result holds no call and an empty link table; the
    training flag and call budget are ``graph``'s.
    """
    out = empty_like(graph)
    env = copy_inputs(graph, out)
    copy_nodes(graph, out, env, prefix, inline=True)
    out.outputs = [map_values(o, lambda v: env[id(v)]) for o in graph.outputs]
    return out
