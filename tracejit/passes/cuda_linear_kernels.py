"""On CUDA, each ``linear`` whose frozen weight is stored transposed (passes/linear_weight_layout.py) runs as
``x @ Wt`` plus the bias (kernels/cuda_linear.py: cuBLAS's "nn" GEMM without the epilogue, as torch.jit's frozen
program runs it): a lowering pass of ``CUDA_IN_MEMORY_PASSES`` (passes/pipeline.py). The kernel is an in-memory
object: a saved program keeps the graph before this pass.

The example runs on any machine: without CUDA nothing changes. Whether the build keeps the pass is timed on the
whole program (backends/cuda_pass_choice.py).

>>> import torch, tracejit
>>> device = "cuda" if torch.cuda.is_available() else "cpu"
>>> net = torch.nn.Linear(8, 4).eval().to(device)
>>> optimized = tracejit.optimize_for_inference(tracejit.trace(net, (torch.randn(2, 8, device=device),)))
>>> lowered = fuse_cuda_linears(Lowered(optimized.forward.graph))   # the pass alone (the build keeps it where it pays)
>>> len(cuda_linear_nodes(lowered.graph)) == (1 if torch.cuda.is_available() else 0)
True
"""
from __future__ import annotations

from ..ir import Graph
from ..kernels.cuda_linear import DTYPES, CudaLinear
from .graph_copy import copy_graph
from .kernel_chains import finish, frozen_constant, kernel_nodes, readers_of, replace_chain, traced_like
from .lowered import Lowered

LINEAR = "aten::linear.default"
DEVICE_TYPE = "cuda"   # (tests/passes/test_cuda_linear_kernels.py sets "meta" to prove the rewrite on a CPU machine)


def fuse_cuda_linears(lowered: Lowered) -> Lowered:
    """A lowering pass: a copy of ``lowered``'s graph where each CUDA linear with a transposed frozen weight is
    one kernel node, its kernel appended to the lowered program's table (passes/lowered.py)."""
    out, kernels = copy_graph(lowered.graph), list(lowered.kernels)
    linears = [n for n in out.nodes if n.op == LINEAR and not n.kwargs and len(n.args) in (2, 3)]
    if not linears:
        return Lowered(out, lowered.kernels)
    readers = readers_of(out)
    changed = False
    for node in linears:
        weight = _constant(out, node.args[1])
        if weight is None or weight.dim() != 2 or not weight.t().is_contiguous() or weight.is_contiguous():
            continue
        bias = _constant(out, node.args[2]) if len(node.args) == 3 and node.args[2] is not None else None
        if len(node.args) == 3 and node.args[2] is not None and (
                bias is None or bias.dim() != 1 or bias.dtype != weight.dtype or bias.device != weight.device):
            continue
        if not traced_like(node.args[0], weight):
            continue
        kernel = CudaLinear(weight, bias)
        replace_chain(out, kernels, [node], kernel, (node.args[0],), "cuda:" + kernel.describe(), readers)
        changed = True
    return Lowered(finish(out, changed), tuple(kernels))


def _constant(graph: Graph, v):
    """The frozen tensor on ``DEVICE_TYPE`` that ``v`` reads (a constant node), or None."""
    return frozen_constant(graph, v, DEVICE_TYPE, DTYPES)


def cuda_linear_nodes(graph: Graph) -> list:
    """The CUDA linear kernel nodes of ``graph`` (for tests and tools)."""
    return kernel_nodes(graph, "cuda:linear")
