"""Conv weights in channels-last layout, so a conv net runs channels-last (NHWC) end to end.

oneDNN's CPU convolution runs NHWC without the reorders NCHW costs; with a channels-last
weight, torch's conv2d returns a channels-last result and relu / add / pooling keep the layout,
so the whole net runs NHWC (ResNet-50, 1 thread: about 12% less time per call). Values are
the same up to float rounding of a different summation order (rtol 1e-5 on ResNet-50).

A channels-last tensor has other strides: ``view`` may refuse it where eager's contiguous
tensor is accepted. So the pass applies only when every op reading a 4-d value is one that
does not care about strides (``ops.is_layout_free``: ATen's pointwise and reduction tags, and the
registry's reviewed overrides: conv2d, pooling, batch_norm, padding, flatten / reshape ...). A 4-d output with more than one spatial element
(a feature map) would come back channels-last: when an elementwise / conv / pooling op made it
(eager's result is contiguous there), the pass adds ``.contiguous()`` before it is returned, one
copy per output; any other such output (a view, an input) leaves the graph as it was. The same
holds for a ``flatten`` / ``reshape`` of a feature map that would be a non-contiguous view (and
for what elementwise ops make from it): ``flatten(2).view(...)`` works in eager only. Besides
those nodes it changes constants only (the archive writes tensors contiguous).
"""
from __future__ import annotations

import math

import torch

from ..ir import Graph, Node, Value, iter_values, map_values
from ..ops.convs import CONV2D as CONVS
from ..ops import gives_tensor, is_fresh, is_layout_free, is_reduction
from ..ops.names import CONSTANT, GUARD, KERNEL, base_name
from .graph_copy import copy_graph

TRACEJIT_LAYOUT_FREE = {GUARD, KERNEL, CONSTANT}
CONTIGUOUS = "aten::contiguous.default"


def conv_weights_channels_last(graph: Graph) -> Graph:
    out = copy_graph(graph)
    if not layout_free(out, fixable_outputs=True):
        return out
    weights: set[int] = set()
    other: set[int] = set()
    for node in out.nodes:
        for i, a in enumerate(node.args):
            if isinstance(a, Value) and a.producer is not None and a.producer.op == CONSTANT:
                (weights if node.op in CONVS and i == 1 else other).add(a.producer.attrs["index"])
        for a in iter_values(tuple(node.kwargs.values())):
            if a.producer is not None and a.producer.op == CONSTANT:
                other.add(a.producer.attrs["index"])
    changed = False
    for index in weights - other:
        w = out.constants[index]
        if isinstance(w, torch.Tensor) and w.dim() == 4 and w.is_floating_point() and w.device.type == "cpu":
            out.constants[index] = w.contiguous(memory_format=torch.channels_last)
            changed = True
    if changed:
        _contiguous_outputs(out)
    return out


def _contiguous_outputs(graph: Graph) -> None:
    """Feature-map outputs made by layout-free ops are returned through ``.contiguous()``, as eager's are."""
    made: dict[int, Value] = {}

    odd = _odd_values(graph)

    def fix(v):
        if not (_spatial(v) or id(v) in odd) or v.producer is None or v.producer.op == CONTIGUOUS:
            return v
        if id(v) not in made:
            node = Node(CONTIGUOUS, "method:contiguous", args=(v,), source=v.producer.source, scope=v.producer.scope)
            node.outputs = [Value(v.type, node, 0, v.hint, v.dynamic)]
            graph.nodes.append(node)
            made[id(v)] = node.outputs[0]
        return made[id(v)]

    graph.outputs = [map_values(o, fix) for o in graph.outputs]


def layout_free(graph: Graph, fixable_outputs: bool = False) -> bool:
    """May every 4-d value of ``graph`` be channels-last: its readers ignore strides, and each
    feature-map output is made contiguous (by a ``contiguous`` node, or, with ``fixable_outputs``,
    by one ``_contiguous_outputs`` can add: its producer is a layout-free op, not a view or input)?"""
    odd = _odd_values(graph)
    for node in graph.nodes:
        if node.op in TRACEJIT_LAYOUT_FREE:
            continue
        if any(_spatial(v) or id(v) in odd for v in node.input_values()):
            if not node.op.startswith("aten::") or not is_layout_free(node.op):
                return False
    for v in iter_values(graph.outputs):
        if not (_spatial(v) or id(v) in odd) or (v.producer is not None and v.producer.op == CONTIGUOUS):
            continue
        if not fixable_outputs or v.producer is None or not _fixable(v.producer):
            return False
    return True


def _odd_values(graph: Graph) -> set:
    """Ids of the values that are not feature maps but may still carry channels-last strides: a
    ``flatten`` / ``reshape`` of a channels-last feature map that is a view ((N, C, H*W) from
    ``flatten(2)``: strides (HWC, 1, C), where eager's is contiguous; ``.view`` refuses it), and
    what elementwise ops and kernels make from such values (their results follow the strides)."""
    odd: set[int] = set()
    for node in graph.nodes:
        ins = list(node.input_values())
        name = base_name(node.op)
        if name == "contiguous" or not any(_spatial(v) or id(v) in odd for v in ins):
            continue
        for v in node.outputs:
            if v is None or _spatial(v) or len(getattr(getattr(v, "type", None), "shape", ())) < 2:
                continue
            if name in ("flatten", "reshape") and _spatial(ins[0]) and not any(id(x) in odd for x in ins):
                if _view_of_channels_last(node, ins[0]):
                    odd.add(id(v))
            elif not is_reduction(node.op) and gives_tensor(node.op) and any(id(x) in odd for x in ins):
                odd.add(id(v))   # (a reduction of a feature map comes out contiguous; size gives a number)
    return odd


def _view_of_channels_last(node, x) -> bool:
    """Would ``node`` (flatten / reshape of the 4-d ``x``) return a non-contiguous view of a
    channels-last tensor (tried on a meta tensor of the traced shape; True when unsure)?"""
    shape = getattr(x.type, "shape", ())
    rest = list(node.args[1:]) + list(node.kwargs.values())
    if not all(isinstance(d, int) for d in shape) or any(isinstance(a, Value) for a in iter_values(rest)):
        return True
    try:
        meta = torch.empty(shape, device="meta").contiguous(memory_format=torch.channels_last)
        fn = torch.flatten if node.op.startswith("aten::flatten") else torch.reshape
        return not fn(meta, *node.args[1:], **node.kwargs).is_contiguous()
    except (RuntimeError, TypeError, ValueError):
        return True


def _fixable(node) -> bool:
    # layout-free and a new tensor: not a view, not in place, not dropout's input (its result may be the
    # caller's tensor), not a number (size)
    return node.op.startswith("aten::") and is_layout_free(node.op) and is_fresh(node.op)


def _spatial(v) -> bool:
    """A 4-d tensor value with more than one spatial element when traced."""
    shape = getattr(getattr(v, "type", None), "shape", ())
    return len(shape) == 4 and math.prod(s if isinstance(s, int) and s >= 0 else 2 for s in shape[2:]) > 1


def channels_last_weights(graph: Graph) -> int:
    """How many constants of ``graph`` are channels-last 4-d tensors (for tests)."""
    return sum(1 for c in graph.constants if isinstance(c, torch.Tensor) and c.dim() == 4
               and not c.is_contiguous() and c.is_contiguous(memory_format=torch.channels_last))
