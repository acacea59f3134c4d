"""Drop ops that return their input unchanged in inference: ``dropout(x, p, train=False)`` and
``x.detach()`` of a constant, in a graph that writes nothing in place.

A ``detach`` of any other value stays: a caller may run the program with autograd on, and then
``x.detach() * 2 + x`` has gradient 1, not 3."""
from __future__ import annotations

from ..ir import Graph, Value, verify
from ..ops import is_dropout, is_inplace
from .graph_copy import copy_graph, replace_uses



def drop_identities(graph: Graph) -> Graph:
    out = copy_graph(graph)
    if any(n.effectful and n.op != "tracejit::guard" for n in out.nodes):
        return out   # an in-place op could write through an alias this pass would create
    mapping: dict = {}
    kept = []
    for node in out.nodes:
        x = node.args[0] if node.args else None
        if isinstance(x, Value) and _is_identity(node):
            mapping[id(node.outputs[0])] = mapping.get(id(x), x)
            continue
        kept.append(node)
    out.nodes = kept
    replace_uses(out, mapping)
    verify(out)
    return out


def _is_identity(node) -> bool:
    if is_dropout(node.op) and not is_inplace(node.op):
        train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train", True)
        p = node.args[1] if len(node.args) > 1 else node.kwargs.get("p", 0.5)
        return train is False or p == 0
    if node.op != "aten::detach.default" or node.kwargs:
        return False
    x = node.args[0]
    return x.producer is not None and x.producer.op == "tracejit::constant"   # frozen copies need no grad
