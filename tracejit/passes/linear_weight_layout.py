"""Constant linear weights stored transposed: ``W`` becomes ``W.t().contiguous().t()``.

``linear(x, W, b)`` multiplies by ``W.t()``; when that view is itself contiguous, BLAS runs the
plain (not transposed) product, 2-10% faster on this CPU for transformer-sized layers, with
bit-identical results (torch.jit's optimize_for_inference does the same with its
FrozenLinearTranspose pass). The weight keeps its shape, values and dtype: only its strides
change, so the graph is unchanged and saves as before (a saved tensor is written contiguous;
``optimize_for_inference`` on the loaded program lays it out again).

Applies to a constant 2-d floating-point tensor on the CPU or on CUDA (measured on both; a device nobody measured
keeps its weights as they are: default-deny). On an H200 (bench/RESULTS.md, "GPU", 2026-11-27), BERT-base at batch
32 (4096 rows, ``F.linear`` on the transposed weight) went from 18.95 to 18.37 ms per call in a CUDA graph; at batch
1 (128 rows) the layout alone did not pay (cuBLAS picked unaligned kernels for ``F.linear``'s bias epilogue, 2.94 ms
of GPU time against eager's 2.81) until passes/cuda_linear_kernels.py ran those linears as ``x @ Wt`` + bias, as
torch.jit's frozen program does: 1.64 ms. Only a weight whose every use is the weight of an
``aten::linear`` that oneDNN will not run (passes/linear_kernels.py: that kernel runs a copy in
oneDNN's blocked layout, and the plain weight only serves its fallback).
"""
from __future__ import annotations

import torch

from ..ir import Graph, Value
from .graph_copy import copy_graph
from .linear_kernels import runs_in_onednn

LINEAR = "aten::linear.default"
CONSTANT = "tracejit::constant"
MEASURED_DEVICES = ("cpu", "cuda")   # where the transposed layout was measured to pay


def transpose_linear_weights(graph: Graph) -> Graph:
    out = copy_graph(graph)
    as_weight: dict[int, int] = {}   # constant index -> uses as a linear weight
    other: set[int] = set()          # constant indices with any other use (several nodes may share one)
    for node in out.nodes:
        for i, a in enumerate(node.args):
            if isinstance(a, Value) and a.producer is not None and a.producer.op == CONSTANT:
                key = a.producer.attrs["index"]
                if node.op == LINEAR and i == 1 and not node.kwargs and not runs_in_onednn(node, out.constants[key]):
                    as_weight[key] = as_weight.get(key, 0) + 1
                else:
                    other.add(key)
        for a in list(node.kwargs.values()) + [x for a in node.args if isinstance(a, (list, tuple)) for x in a]:
            if isinstance(a, Value) and a.producer is not None and a.producer.op == CONSTANT:
                other.add(a.producer.attrs["index"])
    for v in out.outputs:
        if isinstance(v, Value) and v.producer is not None and v.producer.op == CONSTANT:
            other.add(v.producer.attrs["index"])
    for index in as_weight:
        if index in other:
            continue
        w = out.constants[index]
        if isinstance(w, torch.Tensor) and w.dim() == 2 and w.is_floating_point() and w.device.type in MEASURED_DEVICES \
                and w.is_contiguous() \
                and w.layout == torch.strided and w.shape[0] > 1 and w.shape[1] > 1:
            out.constants[index] = w.t().contiguous().t()
    return out


def transposed_weights(graph: Graph) -> int:
    """How many constants of ``graph`` are stored transposed (for tests)."""
    return sum(1 for c in graph.constants if isinstance(c, torch.Tensor) and c.dim() == 2
               and not c.is_contiguous() and c.t().is_contiguous())
