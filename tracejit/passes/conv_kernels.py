"""Each constant-weight conv2d, with the ``add_`` and ``relu`` after it, becomes one oneDNN call.

A chain is ``c = conv2d(x, W, b, ...)`` with W (and b) frozen constants, then, when ``c`` has no
other reader, ``c.add_(r)`` (in place, so the sum has c's shape: a ResNet block's residual) and
then, when the sum has no other reader, ``relu`` / ``relu_``. Rank guards (``dim()`` reads, e.g.
batch norm's input check, left after it was folded into the conv) may read the chain's values:
the rank never changes along it, so they move after the fused node and read its result.

Each chain becomes a ``tracejit::kernel`` node calling a ``OneDnnConv`` (runtime/onednn_conv.py),
which reorders W into oneDNN's layout once and runs the fused op; calls that do not fit run the
recorded ops. The fused op returns channels-last tensors, so the pass applies only to graphs
conv_layout found layout-free. The kernel is an in-memory object (``IN_MEMORY_PASSES``): a
saved program keeps the graph before this pass.
"""
from __future__ import annotations

import torch

from ..ir import Graph, Node, TensorType, Value, iter_values, verify
from ..runtime.onednn_conv import OneDnnConv, available
from .conv_layout import layout_free
from .graph_copy import copy_graph, replace_uses

CONV = "aten::conv2d.default"
ADD_INPLACE = "aten::add_.Tensor"
RELU = ("aten::relu.default", "aten::relu_.default")
KERNEL = "tracejit::kernel"
GUARD = "tracejit::guard"
CONSTANT = "tracejit::constant"
_DEFAULTS = (None, 1, 0, 1, 1)   # conv2d's bias, stride, padding, dilation, groups


def fuse_conv_kernels(graph: Graph) -> Graph:
    """A copy of ``graph`` where each constant-weight conv2d chain is one fused kernel node."""
    out = copy_graph(graph)
    if not available() or not any(n.op == CONV for n in out.nodes) or not layout_free(out):
        return out
    readers = _readers(out)
    changed = False
    for conv in [n for n in out.nodes if n.op == CONV]:
        spec = _conv_spec(out, conv)
        if spec is None:
            continue
        chain, residual, relu = [conv], None, False
        after = _sole_reader(conv.outputs[0], readers, out)
        if after is not None and after.op == ADD_INPLACE and len(after.args) == 2 and not after.kwargs \
                and after.args[0] is conv.outputs[0] and _f32_4d(after.args[1]) \
                and after.args[1] is not conv.outputs[0]:
            chain.append(after)
            residual = after.args[1]
            after = _sole_reader(after.outputs[0], readers, out)
        if after is not None and after.op in RELU and len(after.args) == 1 and not after.kwargs \
                and after.args[0] is chain[-1].outputs[0]:
            chain.append(after)
            relu = True
        kernel = OneDnnConv(*spec, residual=residual is not None, relu=relu,
                            example_shape=conv.args[0].type.shape)
        if kernel._packed is None:   # the constants do not fit oneDNN's op: keep torch's
            continue
        _replace(out, chain, kernel, residual, readers)
        changed = True
    if changed:
        from .dce import eliminate_dead_code
        eliminate_dead_code(out)   # the weights' constant nodes: the kernels hold the tensors
        verify(out)
    return out


def _conv_spec(graph: Graph, conv: Node):
    """(weight, bias, stride, padding, dilation, groups) of a conv2d the kernel can run, else None."""
    if conv.kwargs or not 2 <= len(conv.args) <= 7 or not _f32_4d(conv.args[0]):
        return None
    args = list(conv.args) + list(_DEFAULTS[len(conv.args) - 2:])
    weight, bias = _constant(graph, args[1]), None
    if weight is None or weight.dim() != 4:
        return None
    if args[2] is not None:
        bias = _constant(graph, args[2])
        if bias is None or bias.dim() != 1:
            return None
    if not all(_ints(a) for a in args[3:6]) or not isinstance(args[6], int) or isinstance(args[6], bool):
        return None
    return weight, bias, args[3], args[4], args[5], args[6]


def _replace(graph: Graph, chain: list, kernel: OneDnnConv, residual, readers: dict) -> None:
    conv, last = chain[0], chain[-1]
    inputs = (conv.args[0],) if residual is None else (conv.args[0], residual)
    node = Node(KERNEL, "", args=inputs, attrs={"kernel": kernel, "ops": "onednn:" + kernel.describe()},
                source=conv.source, scope=conv.scope)
    result = last.outputs[0]
    node.outputs = [Value(result.type, node, 0, result.hint, result.dynamic)]
    values = {id(n.outputs[0]) for n in chain}
    gone = {id(n) for n in chain}
    moved = [n for n in graph.nodes if n.op == GUARD and id(n) not in gone
             and any(id(v) in values for v in n.input_values()) and n is not last]
    gone |= {id(n) for n in moved}
    nodes = []
    for n in graph.nodes:
        if n is last:
            nodes += [node] + moved
        elif id(n) not in gone:
            nodes.append(n)
    graph.nodes = nodes
    replace_uses(graph, {id(n.outputs[0]): node.outputs[0] for n in chain})
    for v in inputs:   # the fused node now reads them instead of the chain's nodes
        readers[id(v)] = [node if id(r) in gone else r for r in readers.get(id(v), [])]
    readers[id(node.outputs[0])] = readers.pop(id(result), [])


def _readers(graph: Graph) -> dict:
    """id(Value) -> the nodes reading it (a graph output counts as a reader: None)."""
    readers: dict[int, list] = {}
    for node in graph.nodes:
        for v in node.input_values():
            readers.setdefault(id(v), []).append(node)
    for v in iter_values(graph.outputs):
        readers.setdefault(id(v), []).append(None)
    return readers


def _sole_reader(value: Value, readers: dict, graph: Graph):
    """The one node other than rank guards reading ``value``, or None."""
    others = [n for n in readers.get(id(value), []) if n is None or not _rank_guard(n)]
    return others[0] if len(others) == 1 and others[0] is not None else None


def _rank_guard(node: Node) -> bool:
    return node.op == GUARD and node.attrs.get("kind") == "rank" and len(node.args) == 1


def _constant(graph: Graph, v) -> torch.Tensor | None:
    if isinstance(v, Value) and v.producer is not None and v.producer.op == CONSTANT:
        c = graph.constants[v.producer.attrs["index"]]
        if type(c) in (torch.Tensor, torch.nn.Parameter) and c.dtype == torch.float32 and c.device.type == "cpu" \
                and c.layout == torch.strided and not c.requires_grad:
            return c
    return None


def _f32_4d(v) -> bool:
    t = getattr(v, "type", None) if isinstance(v, Value) else None
    return isinstance(t, TensorType) and t.dtype == torch.float32 and t.device == "cpu" and len(t.shape) == 4


def _ints(a) -> bool:
    if isinstance(a, int) and not isinstance(a, bool):
        return True
    return isinstance(a, (tuple, list)) and len(a) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                for x in a)


def conv_kernel_nodes(graph: Graph) -> list:
    """The fused convolution nodes of ``graph`` (for tests and tools)."""
    return [n for n in graph.nodes if n.op == KERNEL and n.attrs["ops"].startswith("onednn:")]
