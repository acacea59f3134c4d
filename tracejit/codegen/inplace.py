"""Which dead intermediates a node may overwrite in place when no gradient is recorded.

Under ``torch.no_grad()`` / ``torch.inference_mode()`` nothing keeps an
intermediate alive for backward, so an elementwise op whose input is a fresh
intermediate used nowhere else can write into that input (``x.sin_()`` for
``x.sin()``), saving an allocation per op. ``inplace_candidates`` finds such nodes;
codegen emits both forms for them and picks one per call from
``torch.is_grad_enabled()``. It is an analysis, not a pass: it reads the graph
being compiled and writes nothing into it, so it always describes that graph
(a mark stored on a node would outlive a later pass that gives its input a
second use, e.g. common-subexpression elimination).

The node's op must be pointwise with an in-place twin (``ops.inplace_twin``: ATen's
``pointwise`` tag and its ``op_`` schema), called with Python numbers besides its input. The
input must be produced in this graph by an op that always returns a new tensor (``ops.is_fresh``:
schema alias information, the pointwise / reduction tags, the registry's reviewed overrides),
have no other use (so no view of it is alive), and have the output's dtype and shape, with a
floating dtype.
"""
from __future__ import annotations

import torch

from ..ir import Graph, Value, iter_values
from ..ops import inplace_twin, is_fresh

_OPERATORS = {"+": "add", "*": "mul", "-": "sub", "/": "div", "**": "pow", "r+": "add", "r*": "mul", "u-": "neg",
              "%": "remainder"}


def inplace_candidates(graph: Graph) -> dict[int, str]:
    """``{id(node): in-place method}`` for the nodes that may overwrite their first input under no_grad."""
    uses: dict[int, int] = {}
    for node in graph.nodes:
        for v in node.input_values():
            uses[id(v)] = uses.get(id(v), 0) + 1
    for v in iter_values(graph.outputs):
        uses[id(v)] = uses.get(id(v), 0) + 2
    found: dict[int, str] = {}
    for node in graph.nodes:
        name = _base_name(node)
        if name is None or not node.outputs or node.outputs[0] is None or node.kwargs:
            continue
        a = node.args[0] if node.args else None
        if not isinstance(a, Value) or uses.get(id(a), 0) != 1 or a.producer is None:
            continue
        if not all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in node.args[1:]):
            continue
        out = node.outputs[0]
        ta, to = a.type, out.type
        if not (hasattr(ta, "dtype") and hasattr(to, "dtype") and ta.dtype == to.dtype and ta.shape == to.shape
                and ta.dtype.is_floating_point):
            continue
        # the facts from torch's registry last: the first lookup of an op costs ~50 us (a load's first time)
        if a.producer.op.startswith("tracejit::") or not is_fresh(a.producer.op):
            continue
        twin = inplace_twin(name)
        if twin is None or not hasattr(torch.Tensor, twin):
            continue
        found[id(node)] = twin
    return found


def _base_name(node) -> str | None:
    target = node.target
    if target is None:
        return None
    if target.kind == "op":
        return _OPERATORS.get(target.name)
    if target.kind in ("method", "fn"):
        return target.short_name
    return None
