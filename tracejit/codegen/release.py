"""Large intermediates are dropped after their last use.

Generated code is one straight-line function, so each intermediate stays referenced by its local
name until the function returns. A module's own forward frees an activation as soon as its
submodule returns; an inlined, frozen ResNet-50 kept all of them, and the allocator handed out
fresh pages every call (first-touch page faults): freeze ran at 1.9x eager. Like torch's FX
codegen, which deletes values after their last use, the function rebinds the name of a large
tensor to ``None`` right after the last node that reads it. Only tensors with at least
``MIN_ELEMENTS`` elements when traced are released, so small programs run no extra statements.
"""
from __future__ import annotations

import math

from ..ir import Graph, TensorType, iter_values
from ..ops.names import STATE_READS

MIN_ELEMENTS = 1 << 16
_HELD = STATE_READS   # the program's own tensors: not ours to drop


def release_plan(graph: Graph) -> dict[int, list]:
    """``{node index: [values whose last reader is that node]}`` for the large intermediates."""
    kept = {id(v) for v in iter_values(graph.outputs)}
    last: dict[int, int] = {}
    values: dict[int, object] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            if v is not None and _large(v) and id(v) not in kept and node.op not in _HELD:
                values[id(v)] = v
                last[id(v)] = i
        for v in node.input_values():
            if id(v) in values:
                last[id(v)] = i
    plan: dict[int, list] = {}
    for key, i in last.items():
        plan.setdefault(i, []).append(values[key])
    return plan


def _large(v) -> bool:
    t = v.type
    return isinstance(t, TensorType) and math.prod(max(int(s), 1) for s in t.shape) >= MIN_ELEMENTS
