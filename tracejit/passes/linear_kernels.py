"""Each large constant-weight linear, with the relu / gelu after it, becomes one oneDNN call where that pays.

A chain is ``y = linear(x, W, b)`` with W (and b) frozen constants and at least ``MIN_MACS``
multiply-adds when traced, then, when ``y`` has no other reader, an activation oneDNN applies in the same call
(relu, gelu, silu, hardtanh / relu6, hardswish, sigmoid, tanh, ...: kernel_chains.activation_of). Where the chain,
timed on this machine at its traced shape, runs faster in oneDNN than as torch's ops (passes/linear_timing.py), it
becomes a ``tracejit::kernel`` node calling a ``OneDnnLinear`` (kernels/onednn_linear.py); calls that do not fit run
the recorded ops. Smaller or slower linears stay torch's (or a numpy region's, passes/numpy_regions.py, which runs
first). The kernel is an in-memory object (``IN_MEMORY_PASSES``): a saved program keeps the graph before this pass.
"""
from __future__ import annotations

import math

import torch

from ..ir import Graph, Node, TensorType, Value
from ..kernels.onednn_linear import MIN_MACS, OneDnnLinear, available
from .graph_copy import copy_graph
from .linear_timing import deadline, linear_pays
from .lowered import Lowered
from .kernel_chains import activation_after, constant_f32, finish, kernel_nodes, readers_of, replace_chain, write_order

LINEAR = "aten::linear.default"


def fuse_linear_kernels(lowered: Lowered) -> Lowered:
    """A lowering pass: a copy of ``lowered``'s graph where each large constant-weight linear chain is one
    fused kernel node, its kernel appended to the lowered program's table (passes/lowered.py)."""
    out, kernels = copy_graph(lowered.graph), list(lowered.kernels)
    if not available() or not any(n.op == LINEAR for n in out.nodes):
        return Lowered(out, lowered.kernels)
    readers, order = readers_of(out), write_order(out)
    changed, until = False, deadline()
    for linear in [n for n in out.nodes if n.op == LINEAR]:
        spec = _linear_spec(out, linear)
        if spec is None:
            continue
        chain, activation = [linear], ("none", ())
        found = activation_after(linear, readers, order)
        if found is not None:
            chain.append(found[0])
            activation = found[1]
        kernel = OneDnnLinear(*spec, *activation)
        if kernel._packed is None or not linear_pays(kernel, linear.args[0].type.shape, until):
            continue
        replace_chain(out, kernels, chain, kernel, (linear.args[0],), "onednn:" + kernel.describe(), readers)
        changed = True
    return Lowered(finish(out, changed), tuple(kernels))


def _linear_spec(graph: Graph, linear: Node):
    """(weight, bias) of a linear the kernel should run, else None."""
    if linear.kwargs or len(linear.args) not in (2, 3):
        return None
    x = linear.args[0]
    t = getattr(x, "type", None) if isinstance(x, Value) else None
    if not isinstance(t, TensorType) or t.dtype != torch.float32 or t.device != "cpu" or not t.shape:
        return None
    weight = constant_f32(graph, linear.args[1])
    if weight is None or weight.dim() != 2:
        return None
    bias = None
    if len(linear.args) == 3 and linear.args[2] is not None:
        bias = constant_f32(graph, linear.args[2])
        if bias is None or bias.dim() != 1:
            return None
    if not runs_in_onednn(linear, weight):
        return None
    return weight, bias


def runs_in_onednn(linear: Node, weight) -> bool:
    """May this pass hand ``linear`` (weight ``weight``) to oneDNN: is oneDNN there and the product
    large when traced (below ``MIN_MACS`` torch's linear costs less than oneDNN's call)? Never for a weight off the
    CPU (oneDNN here is the CPU's). The structural pre-filter only: whether the call pays is timed after it
    (passes/linear_timing.py), against torch's linear on the weight as passes/linear_weight_layout.py laid it out
    (what runs where oneDNN does not pay)."""
    x = linear.args[0] if linear.args else None
    shape = getattr(getattr(x, "type", None), "shape", None)
    if not available() or not isinstance(weight, torch.Tensor) or weight.device.type != "cpu" or weight.dim() != 2 \
            or not shape \
            or any(not isinstance(s, int) or s < 0 for s in shape):
        return False
    return math.prod(shape) * weight.shape[0] >= MIN_MACS


def linear_kernel_nodes(graph: Graph) -> list:
    """The fused linear nodes of ``graph`` (for tests and tools)."""
    return kernel_nodes(graph, "onednn:linear")
