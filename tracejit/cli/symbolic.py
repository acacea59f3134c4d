"""Which input dimensions a traced graph keeps symbolic, for ``inspect``'s signatures.

The IR marks no dimension as symbolic by itself (a Value's type holds the example's sizes, and
``Value.dynamic`` says only that the value came from the inputs). What it does record is every
size the trace read at run time: an ``aten::size.int`` node on the tensor. A dimension of a
graph input is shown as symbolic (``s0``, ``s1``, ...) when the graph reads it that way and no
guard pins it to one value (a ``tracejit::guard`` that the size equals a constant).
Dimensions the graph never reads are shown with the example's size: the IR cannot say whether
the program accepts other sizes there (most ops do, a size baked into a constant does not).
"""
from __future__ import annotations

from ..ir import GUARD, Value

SIZE_OP = "aten::size.int"
_PINS = {("eq", True), ("ne", False)}   # guard (test, expected) pairs that hold a size to one value


def symbolic_dims(graph) -> dict:
    """``{(id(input Value), dim): "sN"}`` for the graph inputs' dimensions it keeps symbolic."""
    inputs = {id(v): v for v in graph.inputs if isinstance(v, Value) and hasattr(v.type, "shape")}
    reads = {}    # id(size Value) -> (id(input), dim)
    for node in graph.nodes:
        if node.op != SIZE_OP or len(node.args) < 2 or not node.outputs or node.outputs[0] is None:
            continue
        subject, dim = node.args[0], node.args[1]
        if not isinstance(subject, Value) or id(subject) not in inputs or not isinstance(dim, int):
            continue
        rank = len(subject.type.shape)
        if -rank <= dim < rank:
            reads[id(node.outputs[0])] = (id(subject), dim % rank)
    pinned = set()
    for node in graph.nodes:
        if node.op == GUARD and (node.attrs.get("test"), node.attrs.get("expected")) in _PINS:
            for a in node.args:
                if isinstance(a, Value) and id(a) in reads and not any(isinstance(b, Value) for b in node.args
                                                                         if b is not a):
                    pinned.add(reads[id(a)])
    names, order = {}, []
    for key in reads.values():
        if key not in pinned and key not in names:
            names[key] = None
            order.append(key)
    position = {id(v): i for i, v in enumerate(graph.inputs)}
    order.sort(key=lambda k: (position.get(k[0], 0), k[1]))
    return {key: f"s{i}" for i, key in enumerate(order)}
