"""Which values of a graph may be written in place, by the program or by its caller.

A pure node (``x.clone()``, ``torch.zeros_like(x)``, ``x * 2``) makes a new tensor each time it
runs. Merging two such nodes (CSE) or computing one once for every call (constant folding) is
right only while nothing writes into the tensor: after ``a = x.clone(); b = x.clone();
a.add_(1)`` eager's ``b`` is still ``x``, and two outputs eager returns as separate tensors must
not become one tensor the caller then writes through.

``written_values(graph)`` is the set of ids of values that an in-place node writes into (any of
its tensor operands, to stay on the safe side), that the graph returns, or that such a value is a
view of (followed back through every op whose ATen schema says its result aliases an input, and
through any op whose schema is unknown).
"""
from __future__ import annotations

import functools

from ..ir import Graph, Value, iter_values
from ..ops import exact_schema, split_name
from ..ops.names import CONSTANT, GUARD, KERNEL, STATE_READS

FRESH = {KERNEL, CONSTANT}   # tracejit ops whose results are never views


def written_values(graph: Graph, writes: bool = True, outputs: bool = True) -> set:
    """Ids of the values written in place (``writes``) and / or returned (``outputs``), and of what they view."""
    todo: list = []
    for node in graph.nodes if writes else ():
        if node.effectful and node.op != GUARD:
            todo += list(node.input_values())
            todo += [v for v in node.outputs if v is not None]   # an in-place op returns its target
    if outputs:
        todo += list(iter_values(graph.outputs))
    seen: set[int] = set()
    while todo:
        v = todo.pop()
        if not isinstance(v, Value) or id(v) in seen:
            continue
        seen.add(id(v))
        producer = v.producer
        if producer is not None and producer.op not in FRESH and _may_alias(producer.op):
            todo += list(producer.input_values())
    return seen


def writes_state(graph: Graph) -> bool:
    """Does ``graph`` (a flat graph) write in place into a parameter, buffer or constant it reads, or a view of one
    (``self.count += 1``)? Calling such a program changes what its next call computes."""
    written = written_values(graph, writes=True, outputs=False)
    return any(n.op in STATE_READS and any(id(v) in written for v in n.outputs if v is not None) for n in graph.nodes)


@functools.lru_cache(maxsize=None)
def _may_alias(op: str) -> bool:
    """May the result of ``op`` ("aten::select.int") share memory with an input (True when unknown)?"""
    schema = exact_schema(op) if split_name(op).namespace == "aten" else None
    if schema is None:
        return True
    return any(r.alias_info is not None for r in schema.returns) or any(
        str(r.type).startswith(("Tensor[]", "List")) for r in schema.returns)
