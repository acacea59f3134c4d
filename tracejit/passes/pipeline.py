"""The pass pipelines: named IR -> IR passes, in the order they run.

``TRACE_PIPELINE`` finishes every graph a trace records (api.py hands it to trace/api.record, which runs
it once per new graph); the verifier checks the result, and after each pass too when ``VERIFY_EACH`` is
on (the environment variable ``TRACEJIT_VERIFY_PASSES=1``; the test suite turns it on).

``INFERENCE_PASSES`` is optimize_for_inference's: ``freeze`` (in tracejit/inference.py) runs first
for modules; then these, each on a copy, each verified (their result is what a saved program
holds); then ``IN_MEMORY_PASSES`` (what runs in this process).
"""
from __future__ import annotations

import copy
import os
from dataclasses import replace

import torch

from ..ir.guard_nodes import training_guard
from ..ir import Graph, TensorType, verify
from .cse import eliminate_common_subexpressions
from .decisions import EXACT_PASSES, decision_on_computed_values
from .dce import eliminate_dead_code
from .drop_identities import drop_identities
from .fold_constants import fold_constants
from .blocked_convs import blocked_conv_regions
from .conv_kernels import fuse_conv_kernels
from .conv_layout import conv_weights_channels_last
from .cuda_conv_kernels import fuse_cudnn_convs
from .cuda_linear_kernels import fuse_cuda_linears
from .cuda_sibling_linears import fuse_cuda_sibling_linears
from .fold_conv_bn import fold_conv_batch_norm
from .graph_copy import copy_graph
from .inline import inline_calls
from .linear_kernels import fuse_linear_kernels
from .linear_weight_layout import transpose_linear_weights
from .lowered import Lowered
from .numpy_regions import fuse_numpy_regions
from .vision_kernels import roi_align_kernels


def add_training_guard(graph: Graph) -> Graph:
    """A root method of a module (``graph.training`` set) first checks the module's training flag."""
    if graph.training is not None:
        graph.nodes.insert(0, training_guard(graph.training))
    return graph


TRACE_PIPELINE = (
    ("add_training_guard", add_training_guard),
    ("eliminate_dead_code", eliminate_dead_code),
)
VERIFY_EACH = os.environ.get("TRACEJIT_VERIFY_PASSES", "0") not in ("", "0")


def run_trace_pipeline(graph: Graph) -> Graph:
    """Run ``TRACE_PIPELINE`` on a freshly recorded graph (the passes may work in place); verify the result."""
    for name, fn in TRACE_PIPELINE:
        graph = fn(graph)
        if VERIFY_EACH:
            _verify_after(graph, name, "trace")
    if not VERIFY_EACH:
        _verify_after(graph, " / ".join(name for name, _ in TRACE_PIPELINE) or "(none)", "trace")
    return graph


def _verify_after(graph: Graph, name: str, pipeline: str) -> None:
    try:
        verify(graph)
    except Exception as e:
        raise RuntimeError(f"{pipeline} pass {name} produced an invalid graph: {e}") from e


def dead_code_elimination(graph: Graph) -> Graph:
    """``eliminate_dead_code`` on a copy (it works in place)."""
    return eliminate_dead_code(copy_graph(graph))


# what ``freeze`` runs first on a method that calls submodules: passes work on one flat graph
INLINE_PASSES = (("inline_calls", inline_calls),)

INFERENCE_PASSES = (
    ("drop_identities", drop_identities),
    ("fold_conv_batch_norm", fold_conv_batch_norm),
    ("fold_constants", fold_constants),
    ("eliminate_common_subexpressions", eliminate_common_subexpressions),
    ("dead_code_elimination", dead_code_elimination),
    ("transpose_linear_weights", transpose_linear_weights),
    ("conv_weights_channels_last", conv_weights_channels_last),
)

# run after INFERENCE_PASSES on the graph that runs (``lower``): lowering passes, Lowered -> Lowered; the
# kernels they build live in the lowered program (passes/lowered.py), never in a Graph or a file, so a
# saved program keeps the graph before them (tracejit/inference.py)
IN_MEMORY_PASSES = (
    ("blocked_conv_regions", blocked_conv_regions),   # first: the passes after it never see a blocked tensor
    ("fuse_conv_kernels", fuse_conv_kernels),
    ("fuse_numpy_regions", fuse_numpy_regions),
    ("fuse_linear_kernels", fuse_linear_kernels),
    ("roi_align_kernels", roi_align_kernels),   # exact: torchvision's reference roi_align without its index copies
)
# the lowering passes of a program whose tensors are all on CUDA (cuDNN's fused conv + relu; sibling linears as one
# batched GEMM; the other linears as "nn" GEMMs)
CUDA_IN_MEMORY_PASSES = (
    ("blocked_conv_regions", blocked_conv_regions),   # first: the passes after it never see a blocked tensor
    ("fuse_cudnn_convs", fuse_cudnn_convs),
    ("fuse_cuda_sibling_linears", fuse_cuda_sibling_linears),
    ("fuse_cuda_linears", fuse_cuda_linears),
)


def in_memory_passes(graph: Graph, tensors=()) -> tuple:
    """The lowering passes for ``graph`` on the device it runs on: ``IN_MEMORY_PASSES`` where every tensor it holds
    (its constants and ``tensors``) and every recorded tensor type is on the CPU, ``CUDA_IN_MEMORY_PASSES`` where
    they are all on CUDA, none elsewhere (default-deny: a device nobody measured gets torch's ops); none either where
    ``graph`` decides on values its weights compute (``exact_only``: every lowering pass changes rounding)."""
    if runs_on_cpu(graph, tensors):
        return exact_only(graph, IN_MEMORY_PASSES)
    held = _held(graph, tensors)
    if all(t.device.type == "cuda" for t in held) and all(t.device.startswith("cuda") for t in _tensor_types(graph)):
        return exact_only(graph, CUDA_IN_MEMORY_PASSES)
    return ()


def runs_on_cpu(graph: Graph, tensors=()) -> bool:
    """May ``IN_MEMORY_PASSES`` (numpy, numexpr and oneDNN kernels: CPU only) run ``graph``? Only when
    every tensor the program holds (its constants, and ``tensors``: a module's preserved parameters
    and buffers) and every tensor type it recorded is on the CPU. A program traced on another device,
    moved there or loaded there with ``map_location`` keeps torch's ops, which run on every device
    (default-deny: a device nobody listed gets no CPU kernel)."""
    held = _held(graph, tensors)
    if any(t.device.type != "cpu" for t in held):
        return False
    return all(t.device == "cpu" for t in _tensor_types(graph))


def program_device(traced) -> str:
    """'cpu' when every tensor the program holds and every recorded tensor type is on the CPU, else the
    first other device seen (the ONNX backends run on the CPU: default-deny for any other device)."""
    graph = traced._method("forward").graph if hasattr(traced, "_method") else traced.graph
    held = list(traced.parameters()) + list(traced.buffers()) if hasattr(traced, "parameters") else []
    if runs_on_cpu(graph, held):
        return "cpu"
    others = [str(t.device) for t in held if t.device.type != "cpu"]
    others += [v.type.device for v in graph.inputs if getattr(v, "type", None) is not None
               and getattr(v.type, "device", "cpu") != "cpu"]
    return others[0] if others else "another device"


def _held(graph: Graph, tensors) -> list:
    """The tensors a program holds: its constants and ``tensors`` (a module's preserved parameters and buffers)."""
    return [c for c in graph.constants if isinstance(c, torch.Tensor)] + list(tensors)


def _tensor_types(graph: Graph):
    for v in list(graph.inputs) + [o for n in graph.nodes for o in n.outputs]:
        t = getattr(v, "type", None)
        if isinstance(t, TensorType):
            yield t


def exact_only(graph: Graph, passes: tuple) -> tuple:
    """``passes``, less those outside ``decisions.EXACT_PASSES`` where ``graph`` decides on values its weights
    compute (a detector's thresholds: passes/decisions.py)."""
    if decision_on_computed_values(graph) is None:
        return passes
    return tuple(p for p in passes if p[0] in EXACT_PASSES)


def run_passes(graph: Graph, passes=None) -> Graph:
    """Run ``passes`` (default: ``INFERENCE_PASSES``, read at each call, ``exact_only``) in order on copies of
    ``graph``; each result is verified and stamped: its ``.passes`` holds ``(pass name, nodes before, nodes
    after)`` for every pass that made it, oldest first. A pass that returns its input unchanged is stamped on a
    shallow copy, so the graph a user holds is never written."""
    for name, fn in exact_only(graph, INFERENCE_PASSES) if passes is None else passes:
        new = fn(graph)
        _verify_after(new, name, "inference")
        if new is graph:
            new = copy.copy(graph)
        new.training = graph.training
        new.passes = tuple(graph.passes) + ((name, len(graph.nodes), len(new.nodes)),)
        graph = new
    return graph


def lower(graph: Graph, passes=None) -> Lowered:
    """The lowered program of ``graph``: ``passes`` (default ``IN_MEMORY_PASSES``, read at each call), each a
    ``Lowered -> Lowered`` lowering pass, run in order from ``Lowered(graph)``; each result's graph is verified
    and stamped as ``run_passes`` stamps (``.passes``), and ``graph`` itself is never written."""
    lowered = Lowered(graph)
    for name, fn in IN_MEMORY_PASSES if passes is None else passes:
        new = fn(lowered)
        _verify_after(new.graph, name, "inference")
        stamped = copy.copy(new.graph) if new.graph is lowered.graph else new.graph
        stamped.training = lowered.graph.training
        stamped.passes = tuple(lowered.graph.passes) + ((name, len(lowered.graph.nodes), len(stamped.nodes)),)
        lowered = replace(new, graph=stamped)
    return lowered
