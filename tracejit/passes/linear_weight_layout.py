"""Constant linear weights stored transposed: ``W`` becomes ``W.t().contiguous().t()``.

``linear(x, W, b)`` multiplies by ``W.t()``; when that view is itself contiguous, BLAS runs the
plain (not transposed) product, 2-10% faster on this CPU for transformer-sized layers, with
bit-identical results (torch.jit's optimize_for_inference does the same with its
FrozenLinearTranspose pass). Bit-identical only where BLAS runs both layouts with one kernel: on this CPU it
does not for few rows (1-3) or few outputs (10 classes), where the transposed product is a dot-product loop 2-3x
further from the float64 answer (40 of 40 random [1, 2048] x [2048, 10] products; Inception-v3's classifier at
batch 1 took the optimized program further from float64 than torch.jit's freeze) and up to 2x slower. So on the
CPU a weight is transposed only where both layouts give the same bits for each linear reading it at its traced
shape (``same_bits``: one product each on seeded random inputs of that shape, cached per shape); a call with
other rows may still differ (fp32 reassociation, as any pass). The weight keeps its shape, values and dtype: only its strides
change, so the graph is unchanged and saves as before (a saved tensor is written contiguous;
``optimize_for_inference`` on the loaded program lays it out again).

Applies to a constant 2-d floating-point tensor on the CPU or on CUDA (measured on both; a device nobody measured
keeps its weights as they are: default-deny). On an H200 (bench/RESULTS.md, "GPU", 2026-11-27), BERT-base at batch
32 (4096 rows, ``F.linear`` on the transposed weight) went from 18.95 to 18.37 ms per call in a CUDA graph; at batch
1 (128 rows) the layout alone did not pay (cuBLAS picked unaligned kernels for ``F.linear``'s bias epilogue, 2.94 ms
of GPU time against eager's 2.81) until passes/cuda_linear_kernels.py ran those linears as ``x @ Wt`` + bias, as
torch.jit's frozen program does: 1.64 ms. Only a weight whose every use is the weight of an ``aten::linear``.
That includes a linear large enough for oneDNN (passes/linear_kernels.py): whether oneDNN runs it is timed later,
against torch's linear on the weight as laid out here, which is what runs where oneDNN does not pay. Until session
32 such a linear kept the plain layout, so every linear that oneDNN's timing turned down ran torch's slower
transposed-product GEMM: DeiT-tiny at batch 1 (50 rows; 576 x 192, 768 x 192, 192 x 768 weights) spent 110 us a
call in ``addmm`` where torch.jit's freeze spends 81 in ``mm``, and its optimized program took 0.84x eager against
jit freeze's 0.62x.
"""
from __future__ import annotations

import functools
import math

import torch

from ..ir import Graph, TensorType, Value
from .graph_copy import copy_graph

LINEAR = "aten::linear.default"
CONSTANT = "tracejit::constant"
MEASURED_DEVICES = ("cpu", "cuda")   # where the transposed layout was measured to pay


def transpose_linear_weights(graph: Graph) -> Graph:
    out = copy_graph(graph)
    as_weight: dict[int, list] = {}   # constant index -> the linears it is the weight of
    other: set[int] = set()          # constant indices with any other use (several nodes may share one)
    for node in out.nodes:
        for i, a in enumerate(node.args):
            if isinstance(a, Value) and a.producer is not None and a.producer.op == CONSTANT:
                key = a.producer.attrs["index"]
                if node.op == LINEAR and i == 1 and not node.kwargs:
                    as_weight.setdefault(key, []).append(node)
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
                and w.layout == torch.strided and w.shape[0] > 1 and w.shape[1] > 1 \
                and (w.device.type != "cpu" or all(_exact_for(node, w) for node in as_weight[index])):
            out.constants[index] = w.t().contiguous().t()
    return out


def _exact_for(linear, weight: torch.Tensor) -> bool:
    """Does ``linear`` (weight ``weight``) give the same bits with the weight transposed, at its traced shape?"""
    t = getattr(linear.args[0], "type", None) if linear.args else None
    shape = t.shape if isinstance(t, TensorType) else None
    if not shape \
            or any(not isinstance(s, int) or isinstance(s, bool) or s <= 0 for s in shape):
        return False   # an unknown or empty traced shape: the plain layout (default-deny)
    bias = len(linear.args) > 2 and linear.args[2] is not None
    return same_bits(math.prod(shape[:-1]), weight.shape[1], weight.shape[0], weight.dtype, bias)


@functools.lru_cache(maxsize=256)
def same_bits(rows: int, inner: int, outputs: int, dtype: torch.dtype, bias: bool) -> bool:
    """Does the CPU's ``linear`` of [rows, inner] by a weight [outputs, inner] give the same bits with the weight
    stored transposed? One product each on seeded random inputs (a BLAS that sums in another order differs in some
    of ``rows * outputs`` sums of ``inner`` random terms)."""
    if rows * inner * outputs > (1 << 31):
        return False   # the probe itself would take seconds: the plain layout
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, inner, generator=gen).to(dtype)
    w = torch.randn(outputs, inner, generator=gen).to(dtype)
    b = torch.randn(outputs, generator=gen).to(dtype) if bias else None
    with torch.no_grad():
        plain = torch.nn.functional.linear(x, w, b)
        flipped = torch.nn.functional.linear(x, w.t().contiguous().t(), b)
    return torch.equal(plain, flipped)


def transposed_weights(graph: Graph) -> int:
    """How many constants of ``graph`` are stored transposed (for tests)."""
    return sum(1 for c in graph.constants if isinstance(c, torch.Tensor) and c.dim() == 2
               and not c.is_contiguous() and c.t().is_contiguous())
