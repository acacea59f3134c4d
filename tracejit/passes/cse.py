"""Common-subexpression elimination: a pure node equal to an earlier one reuses its outputs.

Two nodes are equal when op, target, attributes and arguments match (Values by identity,
constants by type and value; a float's sign too, so ``x * 0.0`` and ``x * -0.0`` stay apart). Nodes
with effects, random ops (the recorder's ``nondeterministic`` mark, or ATen's ``nondeterministic_seeded``
tag), uninitialized memory (empty ...) and tracejit's own nodes other than get_attr are never merged
(ops/purity.mergeable), and an in-place op ends every match made before it (it may
have changed what an earlier node read). A node whose result the program writes into is never
merged (``a = x.clone(); b = x.clone(); a.add_(1)``), nor are two nodes whose results are both
returned (the caller may write into one): passes/written.py.
"""
from __future__ import annotations

import math

from ..ir import Graph, Value, map_values, verify
from ..ops import mergeable
from .graph_copy import copy_graph, replace_uses
from .written import written_values

def _key(obj):
    if isinstance(obj, float):   # 0.0 == -0.0, but x * -0.0 is not x * 0.0
        return ("float", obj, math.copysign(1.0, obj))
    if isinstance(obj, Value):
        return ("v", id(obj))
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__,) + tuple(_key(x) for x in obj)
    if isinstance(obj, dict):
        return ("dict",) + tuple((k, _key(v)) for k, v in obj.items())
    if isinstance(obj, slice):
        return ("slice", _key(obj.start), _key(obj.stop), _key(obj.step))
    try:
        hash(obj)
    except TypeError:
        return ("id", id(obj))
    return (type(obj).__name__, obj)


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    out = copy_graph(graph)
    written = written_values(out, outputs=False)
    returned = written_values(out, writes=False)
    seen: dict = {}
    mapping: dict = {}
    kept = []
    for node in out.nodes:
        if mapping:
            replace_uses_in_node(node, mapping)
        if node.effectful:
            seen.clear()
        if not mergeable(node) or any(v is not None and id(v) in written for v in node.outputs):
            kept.append(node)   # (a tensor the program writes into is its own: a.add_(1) must not reach b)
            continue
        key = (node.op, node.target, _key(node.args), _key(node.kwargs), _key(node.attrs))
        prev = seen.get(key)
        if prev is not None and _escapes(prev, returned) and _escapes(node, returned):
            prev = None   # two tensors eager returns apart must not come back as one
        if prev is None or len(prev.outputs) != len(node.outputs):
            seen[key] = node
            kept.append(node)
            continue
        for old, new in zip(node.outputs, prev.outputs):
            if old is not None:
                mapping[id(old)] = new
    out.nodes = kept
    replace_uses(out, mapping)
    verify(out)
    return out


def _escapes(node, returned: set) -> bool:
    return any(v is not None and id(v) in returned for v in node.outputs)


def replace_uses_in_node(node, mapping: dict) -> None:
    sub = lambda v: mapping.get(id(v), v)  # noqa: E731
    node.args = map_values(node.args, sub)
    node.kwargs = map_values(node.kwargs, sub)
