"""The work of a loaded program's traced example call, computed at load from the traced shapes (never read from
the file): the base of each call's work allowance (support/call_budget.Allowance, docs/SECURITY.md). The graph walk
and the element counts are here; a node's size rule is measured by serialize/budget_plan.BudgetPlan.node_work.

A node counts its op's step weight (``ops.step_work``) times the traced elements of its tensor arguments and of its
outputs, plus its multiply-adds where its size rule says (a contraction, a convolution, at the traced shapes), plus
the work of the submodule methods it calls. That is at least what a call at the traced shapes adds to its running
total (``work_count`` counts the arguments, a size check the elements made and the multiply-adds), so a real
program called as it was traced uses about 1 / ALLOWANCE_FACTOR of its allowance.
"""
from __future__ import annotations

import math

from ..ir import Value

UNKNOWN = 2 ** 62   # the most a node's or a graph's work counts (over any file's cap)


def _elements(v) -> int:
    """Traced elements of a Value (0 for a non-tensor), of a list's tensors summed."""
    if isinstance(v, (list, tuple)):
        return sum(_elements(x) for x in v)
    t = getattr(v, "type", None) if isinstance(v, Value) else None
    shape = getattr(t, "shape", None)
    return 0 if shape is None else _size(shape)


def _arguments(node, broadcast: bool = True) -> int:
    """The elements a call's ``work_count`` counts for the node's tensor arguments (support/call_budget.tensor_elements
    at the traced shapes): its largest tensor, a list's tensors summed, the broadcast of tensors of different shapes
    (each dimension's largest size); without ``broadcast`` (an op whose size rule counts its multiply-adds: a
    convolution, a matmul) its largest tensor."""
    first = None
    others = []
    listed = 0
    for a in (*node.args, *node.kwargs.values()) if node.kwargs else node.args:
        if a.__class__ is Value:
            shape = getattr(a.type, "shape", None)
            if shape is None:
                continue
            if first is None:
                first = shape
            elif shape != first:
                others.append(shape)
        elif isinstance(a, (list, tuple)):
            listed = max(listed, _elements(a))
    if first is None:
        return listed
    if not others:
        return max(_size(first), listed)
    if not broadcast:
        return max(max(_size(shape) for shape in (first, *others)), listed)
    dims: list[int] = []
    for shape in (first, *others):
        for i in range(1, len(shape) + 1):
            d = shape[-i] if type(shape[-i]) is int and shape[-i] >= 1 else 1
            if i > len(dims):
                dims.append(d)
            elif d > dims[i - 1]:
                dims[i - 1] = d
    return max(min(math.prod(dims), UNKNOWN), listed)


def _size(shape) -> int:
    """The elements of a traced shape, each 0 (or a dimension that is no int) counted as 1 (an empty tensor's
    extent, as the size rules count it)."""
    n = math.prod(shape)
    if n > 0:
        return min(n, UNKNOWN)
    return min(math.prod(s if type(s) is int and s >= 1 else 1 for s in shape), UNKNOWN)


def element_work(node, step: int, broadcast: bool = True) -> int:
    """``step`` times the traced elements of a node's tensor arguments (as ``work_count`` counts them, with
    ``broadcast``) and outputs."""
    if not step:
        return 0
    outs = 0
    for v in node.outputs:
        shape = None if v is None else getattr(v.type, "shape", None)
        if shape is not None:
            outs += _size(shape)
    return min(step * (_arguments(node, broadcast) + outs), UNKNOWN)


def graph_work(graph, memo: dict, node_work) -> int:
    """The work of one call of ``graph`` at its traced shapes, the methods it calls included (``node_work(node)``:
    one node's, serialize/budget_plan.BudgetPlan.node_work; ``memo``: by graph id; a graph met again while it is
    being summed, or a call of a method not linked (the loader refuses both), counts as nothing)."""
    return summed_over_calls(graph, memo, node_work, 0)


def summed_over_calls(graph, memo: dict, per_node, unlinked: int) -> int:
    """``per_node(node)`` summed over a graph's nodes, a call of a submodule method counting its callee's sum (each
    call again; ``memo``: by graph id), at most UNKNOWN. A call whose callee is not linked, or of a graph met again
    while it is being summed (a cycle), counts ``unlinked``."""
    key = id(graph)
    if key in memo:
        return unlinked if memo[key] < 0 else memo[key]
    memo[key] = -1
    total = 0
    callees = getattr(graph, "callees", None) or {}
    for n in graph.nodes:
        if n.op == "tracejit::call_module":
            callee = callees.get((n.attrs.get("path"), n.attrs.get("method")))
            total += unlinked if callee is None else summed_over_calls(callee, memo, per_node, unlinked)
        else:
            total += per_node(n)
        total = min(total, UNKNOWN)
    memo[key] = total
    return total


def input_shapes(graph) -> tuple:
    """The traced shapes of the tensor inputs its budget's entry line counts (codegen/budget_emit.enter_line), in
    that order, as tuples of ints (a dimension that is no int: 1, so any size counts as growth)."""
    out = []
    for v in graph.inputs:
        shape = getattr(v.type, "shape", None)
        if shape is None or v.capture:
            continue
        out.append(tuple(s if type(s) is int and s >= 1 else 1 for s in shape))
    return tuple(out)
