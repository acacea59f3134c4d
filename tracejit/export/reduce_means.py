"""``ReduceMean`` again for each mean whose reduced sizes a model with fixed input sizes knows (static_shapes.py).

A mean over a dynamic axis is exported as ``ReduceSum / count`` (edge_values.mean: an axis that is 0 in a call
gives NaN as eager, where ``ReduceMean`` gives 0). Once the input sizes are fixed and folded, ``count`` is a
constant and no reduced axis can be empty, but the pair stays two kernels, and onnxruntime leaves them as
they are: a squeeze-excitation block's spatial mean (MobileNet-V3, EfficientNet, GhostNet, RegNetY) then runs
apart from the blocked (NCHWc) layout it keeps a ``ReduceMean`` in (MobileNet-V3-small at batch 1, one thread:
302 -> 278 us, torch.onnx's file, whose sizes are constants, 261 us). ``restore_reduce_means`` rewrites each
``Div(ReduceSum(x, axes), c)`` whose ``c`` is the number of elements the sum covers (the reduced sizes known and
non-zero) into ``ReduceMean(x, axes)``: the mean edge_values.mean writes when it knows the sizes.
"""
from __future__ import annotations

import math

import numpy as np

from .tidy import constant_array, replace_node


def restore_reduce_means(graph) -> int:
    """Rewrite each ``Div(ReduceSum(x, axes), count)`` of ``graph`` (an onnx-ir Graph, changed in place) whose
    ``count`` is the constant number of elements summed (non-zero) into one ``ReduceMean``; returns how many."""
    import onnx_ir as ir   # optional dependency (the onnx extra)
    rewritten = 0
    for div in list(graph):
        plan = _mean_of(div, ir)
        if plan is None:
            continue
        total, x, axes = plan
        mean = ir.Node("", "ReduceMean", [x, axes], [ir.Attr("keepdims", ir.AttributeType.INT, total.attributes
                                                             .get_int("keepdims", 1))],
                       num_outputs=1, name=f"{div.name}_mean")
        replace_node(graph, div, mean, [total])   # the sum's one use was the division
        rewritten += 1
    return rewritten


def _mean_of(div, ir):
    """(the ReduceSum, its input, its axes value) when ``div`` divides a single-use ReduceSum by the number of
    elements it sums (the reduced sizes known and non-zero); else None."""
    if div.op_type != "Div" or div.domain not in ("", "ai.onnx") or len(div.inputs) != 2:
        return None
    total_value, count_value = div.inputs
    total = total_value.producer() if total_value is not None else None
    if (total is None or total.op_type != "ReduceSum" or total.domain not in ("", "ai.onnx")
            or len(total.inputs) != 2 or total.inputs[1] is None or len(total_value.uses()) != 1
            or total_value.is_graph_output() or total.attributes.get_int("noop_with_empty_axes", 0)):
        return None
    x, axes_value = total.inputs
    shape = x.shape
    axes, count = constant_array(axes_value), constant_array(count_value)
    if shape is None or axes is None or count is None or count.size != 1:
        return None
    rank = len(shape)
    axes = [int(a) for a in axes.reshape(-1)]
    if not axes or not all(-rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        return None
    sizes = [shape[a % rank] for a in axes]
    if not all(isinstance(s, int) for s in sizes):   # a reduced size unknown: maybe 0 in a call
        return None
    elements = math.prod(sizes)
    if elements <= 0 or float(count.reshape(-1)[0]) != float(elements):
        return None
    return total, x, axes_value

