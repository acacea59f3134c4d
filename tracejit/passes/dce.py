"""Dead code elimination: drop pure nodes whose outputs nothing uses (a ``seeded`` random draw stays: it moves
the stream of a generator the program seeded, trace/rng_record.py)."""
from __future__ import annotations

from ..ir import Graph, iter_values
from ..ops import droppable


def eliminate_dead_code(graph: Graph) -> Graph:
    used: set[int] = {id(v) for v in iter_values(graph.outputs)}
    kept = []
    for node in reversed(graph.nodes):
        live = node.effectful or node.attrs.get("seeded") or not droppable(node.op) or any(
            v is not None and id(v) in used for v in node.outputs)
        if live:
            kept.append(node)
            used.update(id(v) for v in node.input_values())
    kept.reverse()
    graph.nodes = kept
    return graph
