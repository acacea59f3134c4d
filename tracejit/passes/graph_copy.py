"""A fresh copy of a Graph (new Nodes and Values), so passes never change the graph a user holds."""
from __future__ import annotations

from ..ir import Graph
from .inline import inline_calls

GUARD_OP = "tracejit::guard"


def copy_graph(graph: Graph) -> Graph:
    """A copy of ``graph`` with submodule calls inlined (passes work on one flat graph)."""
    out = inline_calls(graph)
    out.training = graph.training
    out.name = graph.name
    out.call_budget = graph.call_budget   # a loaded program stays checked when passes rebuild it
    for node in out.nodes:
        if node.op == GUARD_OP:
            node.effectful = True   # a guard's check must survive DCE, CSE and folding
    return out


def replace_uses(graph: Graph, mapping: dict) -> None:
    """Replace every use of a Value ``v`` with ``mapping[id(v)]`` (a Value or a constant), in place."""
    from ..ir import Value, map_values

    def sub(v):
        return mapping.get(id(v), v) if isinstance(v, Value) else v

    for node in graph.nodes:
        node.args = map_values(node.args, sub)
        node.kwargs = map_values(node.kwargs, sub)
    graph.outputs = [map_values(o, sub) for o in graph.outputs]
    graph.input_leaves = list(graph.input_leaves)
