"""Each ``torchvision::roi_align`` whose registered CPU kernel is torchvision's Python reference becomes one kernel
node computing the reference's arithmetic without its full-size index copies (kernels/roi_align.py).

The answer is the op's own, to the bit: the pass replaces a node only where ``roi_align.matches_registered``
found the registered kernel giving the kernel's answer on a probe of the node's settings (a C++ kernel, or
any kernel nobody checked, keeps the op: default-deny), with constant settings and a fixed sampling grid
(``sampling_ratio > 0``), on CPU float32 tensors. An exact pass (decisions.EXACT_PASSES): a detector, which
decides on the values it computes, keeps it. The kernel is an in-memory object (``IN_MEMORY_PASSES``): a saved
program keeps the op.
"""
from __future__ import annotations

import torch

from ..ir import Node, TensorType, Value
from ..kernels.roi_align import RoiAlignKernel, matches_registered
from .graph_copy import copy_graph
from .kernel_chains import finish, kernel_nodes, readers_of, replace_chain
from .lowered import Lowered

ROI_ALIGN = "torchvision::roi_align.default"


def roi_align_kernels(lowered: Lowered) -> Lowered:
    """A lowering pass: a copy of ``lowered``'s graph where each roi_align the kernel computes exactly is a kernel
    node, its kernel appended to the lowered program's table (passes/lowered.py)."""
    if not any(n.op == ROI_ALIGN for n in lowered.graph.nodes):
        return lowered
    out, kernels = copy_graph(lowered.graph), list(lowered.kernels)
    readers = readers_of(out)
    changed = False
    for node in [n for n in out.nodes if n.op == ROI_ALIGN]:
        settings = _settings(node)
        if settings is None or not matches_registered(*settings):
            continue
        kernel = RoiAlignKernel(*settings)
        replace_chain(out, kernels, [node], kernel, tuple(node.args[:2]), kernel.describe(), readers)
        changed = True
    return Lowered(finish(out, changed), tuple(kernels))


def _settings(node: Node):
    """(spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned) of a roi_align the kernel takes,
    else None: CPU float32 input [N, C, H, W] and rois [K, 5], every setting a constant, a fixed grid."""
    if node.kwargs or len(node.args) != 7:
        return None
    x, rois, scale, height, width, sampling, aligned = node.args
    for v, rank in ((x, 4), (rois, 2)):
        t = getattr(v, "type", None) if isinstance(v, Value) else None
        if not isinstance(t, TensorType) or t.dtype != torch.float32 or t.device != "cpu" or len(t.shape) != rank:
            return None
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not isinstance(aligned, bool):
        return None
    ints = (height, width, sampling)
    if any(not isinstance(i, int) or isinstance(i, bool) for i in ints) or min(ints) <= 0:
        return None
    return float(scale), height, width, sampling, aligned


def roi_align_kernel_nodes(graph) -> list:
    """The roi_align kernel nodes of ``graph`` (for tests and tools)."""
    return kernel_nodes(graph, "roi_align:")
