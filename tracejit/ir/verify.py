"""Checks that a Graph is well formed: SSA, topological order, known values, plain attributes."""
from __future__ import annotations

from .graph import PLAIN_ATTR_TYPES, Graph, Value, is_plain, iter_values
from .ops import check_tracejit_node, live_attr


class VerificationError(AssertionError):
    pass


def verify(graph: Graph) -> None:
    defined: set[int] = set()
    for v in graph.inputs:
        if v.producer is not None:
            raise VerificationError(f"input {v} has a producer")
        defined.add(id(v))
    for i, node in enumerate(graph.nodes):
        if node.op.startswith("tracejit::"):
            problem = check_tracejit_node(node)
            if problem:
                raise VerificationError(f"node {i}: {problem}")
        for k, a in node.attrs.items():
            if not is_plain(a) and not live_attr(node.op, k):   # live objects belong in the graph's tables
                #  (constants, callees, functions), or in an attribute no file holds (ops.live_attr)
                raise VerificationError(f"node {i} ({node.op}): attribute {k!r} holds a {type(a).__name__}; node "
                                        f"attributes are plain data ({', '.join(t.__name__ for t in PLAIN_ATTR_TYPES)}, "
                                        "and tuples, lists and str-keyed dicts of them)")
        for v in node.input_values():
            if id(v) not in defined:
                raise VerificationError(f"node {i} ({node.op}) uses a value before it is defined")
        for v in node.outputs:
            if v is None:
                continue
            if id(v) in defined:
                raise VerificationError(f"node {i} ({node.op}) redefines a value")
            if v.producer is not node:
                raise VerificationError(f"node {i} ({node.op}) output has the wrong producer")
            defined.add(id(v))
    for v in iter_values(graph.outputs):
        if id(v) not in defined:
            raise VerificationError("graph output is not defined")
    if graph.out_spec is not None and graph.out_spec.num_leaves != len(graph.outputs):
        raise VerificationError("output spec does not match the number of outputs")
    if graph.in_spec is not None:
        n_values = sum(1 for v in graph.inputs if not v.capture)
        if n_values > graph.in_spec.num_leaves:
            raise VerificationError("input spec has fewer leaves than the graph has inputs")
