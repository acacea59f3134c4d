"""Shared by the lowering passes that replace a chain of nodes with one in-memory ``tracejit::kernel`` node
(passes/conv_kernels.py, passes/linear_kernels.py): who reads a value, and the replacement (its kernel goes
to the lowered program's table: passes/lowered.py).

A chain is a producer followed by nodes that each read the previous result as its only reader.
Rank guards (``dim()`` reads) may also read the chain's values: every op these passes fuse keeps
the rank, so those guards move after the fused node and read its result.
"""
from __future__ import annotations

import bisect

import torch

from ..ir import Graph, Node, TensorType, Value, iter_values, verify
from .dce import eliminate_dead_code
from .graph_copy import replace_uses

KERNEL = "tracejit::kernel"
GUARD = "tracejit::guard"
CONSTANT = "tracejit::constant"


def readers_of(graph: Graph) -> dict:
    """id(Value) -> the nodes reading it (a graph output counts as a reader: None)."""
    readers: dict[int, list] = {}
    for node in graph.nodes:
        for v in node.input_values():
            readers.setdefault(id(v), []).append(node)
    for v in iter_values(graph.outputs):
        readers.setdefault(id(v), []).append(None)
    return readers


def sole_reader(value: Value, readers: dict):
    """The one node other than rank guards reading ``value`` (not a graph output), or None."""
    others = [n for n in readers.get(id(value), []) if n is None or not _rank_guard(n)]
    return others[0] if len(others) == 1 and others[0] is not None else None


def write_order(graph: Graph) -> tuple:
    """(position of each node, sorted positions of the nodes that write in place; guards aside): taken
    before any replacement, for ``writes_between``."""
    positions = {id(n): i for i, n in enumerate(graph.nodes)}
    writes = [i for i, n in enumerate(graph.nodes) if n.effectful and n.op != GUARD]
    return positions, writes


def writes_between(order: tuple, first: Node, second: Node) -> bool:
    """Does a node that writes in place run between ``first`` and ``second``? Then they cannot fuse:
    the fused node runs where ``second`` was, and ``first``'s inputs may have changed by then."""
    positions, writes = order
    lo, hi = positions.get(id(first)), positions.get(id(second))
    if lo is None or hi is None:   # a node made after the order was taken (a kernel): do not fuse across it
        return True
    k = bisect.bisect_right(writes, lo)
    return k < len(writes) and writes[k] < hi


_PLAIN_ACTIVATIONS = {"relu": "relu", "silu": "silu", "hardswish": "hardswish", "hardsigmoid": "hardsigmoid",
                      "sigmoid": "sigmoid", "tanh": "tanh"}
_DEFAULT_SCALARS = {"hardtanh": (-1.0, 1.0), "leaky_relu": (0.01,)}


def activation_of(node: Node):
    """(activation name of kernels/onednn_activation.py, its scalars) for an aten activation node
    (in place or not) a kernel can apply after its product, or None."""
    if not node.op.startswith("aten::") or not node.op.endswith(".default") or not node.args:
        return None
    name = node.name[:-1] if node.name.endswith("_") else node.name
    extra, kwargs = list(node.args[1:]), node.kwargs
    if name in _PLAIN_ACTIVATIONS:
        return (_PLAIN_ACTIVATIONS[name], ()) if not extra and not kwargs else None
    if name == "gelu":
        approximate = kwargs.get("approximate", extra[0] if extra else "none")
        if len(extra) > 1 or set(kwargs) - {"approximate"} or approximate not in ("none", "tanh"):
            return None
        return ("gelu" if approximate == "none" else "gelu_tanh"), ()
    if name == "relu6":
        return ("hardtanh", (0.0, 6.0)) if not extra and not kwargs else None
    if name in _DEFAULT_SCALARS and not kwargs and len(extra) <= len(_DEFAULT_SCALARS[name]):
        scalars = tuple(extra) + _DEFAULT_SCALARS[name][len(extra):]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scalars):
            return name, tuple(float(v) for v in scalars)
    return None


def activation_after(node: Node, readers: dict, order: tuple):
    """(activation node, (name, scalars)) when the sole reader of ``node``'s result is an activation a
    kernel can apply in the same call, with no write in place between them; else None."""
    value = node.outputs[0]
    after = sole_reader(value, readers)
    if after is None or not after.args or after.args[0] is not value:
        return None
    activation = activation_of(after)
    return None if activation is None or writes_between(order, node, after) else (after, activation)


def finish(graph: Graph, changed: bool) -> Graph:
    """After kernels replaced chains: drop what they made dead (the weights' constant nodes: the kernels
    hold the tensors) and verify."""
    if changed:
        eliminate_dead_code(graph)
        verify(graph)
    return graph


def _rank_guard(node: Node) -> bool:
    return node.op == GUARD and node.attrs.get("kind") == "rank" and len(node.args) == 1


def constant_f32(graph: Graph, v) -> torch.Tensor | None:
    """The frozen CPU float32 tensor ``v`` reads (a constant node), or None."""
    return frozen_constant(graph, v, "cpu", (torch.float32,))


def traced_like(v, weight) -> bool:
    """Was ``v`` traced as a tensor (rank 1 or more) of ``weight``'s dtype and device?"""
    t = getattr(v, "type", None) if isinstance(v, Value) else None
    return isinstance(t, TensorType) and t.device == str(weight.device) and t.dtype == weight.dtype and len(t.shape) >= 1


def frozen_constant(graph: Graph, v, device_type: str, dtypes: tuple) -> torch.Tensor | None:
    """The frozen strided tensor ``v`` reads (a constant node) when it is on ``device_type`` with one of ``dtypes``
    and needs no gradient, else None."""
    if isinstance(v, Value) and v.producer is not None and v.producer.op == CONSTANT:
        c = graph.constants[v.producer.attrs["index"]]
        if type(c) in (torch.Tensor, torch.nn.Parameter) and c.dtype in dtypes and c.device.type == device_type \
                and c.layout == torch.strided and not c.requires_grad:
            return c
    return None


def replace_chain(graph: Graph, kernels: list, chain: list, kernel, inputs: tuple, ops: str, readers: dict) -> Node:
    """Replace the nodes of ``chain`` with one kernel node calling ``kernel(*inputs)``, placed where
    the chain's last node was; rank guards on the chain's values follow it. ``kernel`` is appended to
    ``kernels`` (the lowered program's table the pass builds: passes/lowered.py), which the node indexes.
    ``readers`` is updated."""
    first, last = chain[0], chain[-1]
    node = Node(KERNEL, "", args=inputs, attrs={"index": len(kernels), "ops": ops}, source=first.source,
                scope=first.scope)
    kernels.append(kernel)
    result = last.outputs[0]
    node.outputs = [Value(result.type, node, 0, result.hint, result.dynamic)]
    values = {id(n.outputs[0]) for n in chain}
    gone = {id(n) for n in chain}
    moved = [n for n in graph.nodes if n.op == GUARD and id(n) not in gone
             and any(id(v) in values for v in n.input_values())]
    gone |= {id(n) for n in moved}
    nodes = []
    for n in graph.nodes:
        if n is last:
            nodes += [node] + moved
        elif id(n) not in gone:
            nodes.append(n)
    graph.nodes = nodes
    replace_uses(graph, {id(n.outputs[0]): node.outputs[0] for n in chain})
    for v in inputs:   # the kernel node now reads them instead of the chain's nodes
        readers[id(v)] = [node if r is not None and id(r) in gone else r for r in readers.get(id(v), [])]
    readers[id(node.outputs[0])] = readers.pop(id(result), [])
    return node


def int_or_pair(a) -> bool:
    """A conv's stride / padding / dilation as a kernel takes it: an int, or a pair of ints."""
    if isinstance(a, int) and not isinstance(a, bool):
        return True
    return isinstance(a, (tuple, list)) and len(a) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                for x in a)


def kernel_nodes(graph: Graph, prefix: str) -> list:
    """The kernel nodes of ``graph`` whose ``ops`` start with ``prefix`` (for tests and tools)."""
    return [n for n in graph.nodes if n.op == KERNEL and n.attrs["ops"].startswith(prefix)]
