"""On CUDA, the linears that read one input with frozen weights of one shape (a transformer's query, key and value)
run as one batched GEMM (kernels/cuda_sibling_linears.py): a lowering pass of ``CUDA_IN_MEMORY_PASSES``
(passes/pipeline.py), before ``fuse_cuda_linears`` takes the linears one by one. The kernel is an in-memory object:
a saved program keeps the graph before this pass.

The kernel node stands where the first of the linears stood and gives one result per linear. No node that writes
in place may run between the first and the last of them (the later ones would have read what it wrote). In float32
the results are laid out as the linears' own (one batched GEMM); in bfloat16 and float16 they are column slices of
one GEMM (what the GPU measured fastest), used only where every reader is proven safe with them
(passes/sibling_slices.py; default-deny: any other reader keeps the linears).

The example runs on any machine: without CUDA nothing changes. Whether the build keeps the pass is timed on the
whole program (backends/cuda_pass_choice.py).

>>> import torch, tracejit
>>> class Attention(torch.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.q, self.k, self.v = (torch.nn.Linear(8, 8) for _ in range(3))
...     def forward(self, x):
...         return torch.nn.functional.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x))
>>> device = "cuda" if torch.cuda.is_available() else "cpu"
>>> net = Attention().eval().to(device)
>>> optimized = tracejit.optimize_for_inference(tracejit.trace(net, (torch.randn(2, 5, 8, device=device),)))
>>> lowered = fuse_cuda_sibling_linears(Lowered(optimized.forward.graph))   # the pass alone (the build keeps it where it pays)
>>> len(sibling_linear_nodes(lowered.graph)) == (1 if torch.cuda.is_available() else 0)
True
"""
from __future__ import annotations

from ..ir import Node, Value
from ..kernels.cuda_sibling_linears import BATCHED_DTYPES, DTYPES, CudaSiblingLinears
from .graph_copy import copy_graph, replace_uses
from .kernel_chains import (KERNEL, finish, frozen_constant, kernel_nodes, readers_of, traced_like, write_order,
                            writes_between)
from .sibling_slices import slice_safe
from .lowered import Lowered

LINEAR = "aten::linear.default"
DEVICE_TYPE = "cuda"   # (tests/passes/test_cuda_sibling_linears.py sets "meta" to prove the rewrite on a CPU machine)


def fuse_cuda_sibling_linears(lowered: Lowered) -> Lowered:
    """A lowering pass: a copy of ``lowered``'s graph where each group of sibling CUDA linears is one kernel node
    with one result per linear, its kernel appended to the lowered program's table (passes/lowered.py)."""
    out, kernels = copy_graph(lowered.graph), list(lowered.kernels)
    groups = _sibling_groups(out)
    if not groups:
        return Lowered(out, lowered.kernels)
    order, readers = write_order(out), readers_of(out)
    changed = False
    for group in groups:
        members, weights, biases = (list(column) for column in zip(*group))
        if writes_between(order, members[0], members[-1]):
            continue
        batched = weights[0].dtype in BATCHED_DTYPES
        if not batched and not all(slice_safe(m.outputs[0], m.args[0], readers) for m in members):
            continue
        kernel = CudaSiblingLinears.of(weights, None if biases[0] is None else biases, batched)
        _replace(out, kernels, members, kernel)
        changed = True
    return Lowered(finish(out, changed), tuple(kernels))


def _sibling_groups(graph) -> list:
    """Lists of two or more ``(linear node, its frozen weight, its frozen bias or None)`` (in graph order) whose
    nodes read one input, each with a weight of one shape, dtype and device, and all with a bias of that dtype or
    none."""
    groups: dict = {}
    for node in graph.nodes:
        if node.op != LINEAR or node.kwargs or len(node.args) not in (2, 3) or not isinstance(node.args[0], Value) \
                or len(node.outputs) != 1 or node.outputs[0] is None:
            continue
        weight = frozen_constant(graph, node.args[1], DEVICE_TYPE, DTYPES)
        if weight is None or weight.dim() != 2 or not traced_like(node.args[0], weight):
            continue
        bias = _bias(graph, node, weight)
        if bias is False:
            continue
        key = (id(node.args[0]), tuple(weight.shape), weight.dtype, str(weight.device), bias is None)
        groups.setdefault(key, []).append((node, weight, bias))
    return [members for members in groups.values() if len(members) >= 2]


def _bias(graph, node, weight):
    """The linear's frozen bias (1-d, the weight's dtype and device), None without one, False for any other."""
    if len(node.args) < 3 or node.args[2] is None:
        return None
    bias = frozen_constant(graph, node.args[2], DEVICE_TYPE, DTYPES)
    if bias is None or bias.dim() != 1 or bias.dtype != weight.dtype or bias.device != weight.device:
        return False
    return bias


def _replace(graph, kernels: list, members: list, kernel) -> None:
    """One kernel node where ``members[0]`` stood, its results replacing the members' results."""
    first = members[0]
    node = Node(KERNEL, "", args=(first.args[0],), source=first.source, scope=first.scope,
                attrs={"index": len(kernels), "ops": "cuda:" + kernel.describe(), "unpack": len(members)})
    kernels.append(kernel)
    node.outputs = [Value(m.outputs[0].type, node, i, m.outputs[0].hint, m.outputs[0].dynamic)
                    for i, m in enumerate(members)]
    gone = {id(m) for m in members}
    nodes = []
    for n in graph.nodes:
        if n is first:
            nodes.append(node)
        elif id(n) not in gone:
            nodes.append(n)
    graph.nodes = nodes
    replace_uses(graph, {id(m.outputs[0]): v for m, v in zip(members, node.outputs)})


def sibling_linear_nodes(graph) -> list:
    """The batched sibling-linear kernel nodes of ``graph`` (for tests and tools)."""
    return [n for n in kernel_nodes(graph, "cuda:") if n.attrs.get("unpack") and " linears (" in n.attrs["ops"]]
