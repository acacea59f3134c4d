"""Freezing: the parameters and buffers a graph reads become constants of the program.

``tracejit::get_attr`` nodes are replaced by ``tracejit::constant`` nodes holding a detached
copy of the tensor (later changes to the module do not reach the frozen program, as with
torch.jit's freeze). Paths in ``preserved`` stay attribute reads.
"""
from __future__ import annotations

from ..ir import Graph, Node, verify
from .graph_copy import copy_graph


def freeze_attributes(graph: Graph, tensor_of, preserved=()) -> Graph:
    """A new graph where every get_attr not in ``preserved`` is a constant.

    ``tensor_of(path)`` returns the module's tensor at ``path`` ("layer.0.weight").
    """
    out = copy_graph(graph)
    keep = set(preserved)
    nodes = []
    for node in out.nodes:
        path = node.attrs.get("path")
        if node.op != "tracejit::get_attr" or path in keep or _under(path, keep):
            nodes.append(node)
            continue
        const = Node("tracejit::constant", "", attrs={"index": len(out.constants), "frozen_from": path},
                     source=node.source, scope=node.scope)
        out.constants.append(tensor_of(path).detach().clone())
        const.outputs = node.outputs
        for v in const.outputs:
            if v is not None:
                v.producer = const
        nodes.append(const)
    out.nodes = nodes
    verify(out)
    return out


def _under(path: str, prefixes) -> bool:
    return any(path.startswith(p + ".") for p in prefixes)
