"""Sibling CUDA linears (several linears of one input with weights of one shape: BERT's query, key and value) run
as one GEMM, two ways, measured on an H200 (bench/gpu_sibling_linears.py, three 768 x 768 linears in one CUDA graph):

* ``batched`` (float32): ``bmm(x, W)`` over the stacked transposed weights, then the biases added in place. Each
  result is a contiguous block of the batched product, shaped and laid out as the linear's own, so nothing that
  reads it can tell. 0.42x three ``F.linear`` at 128 rows (BERT-base at batch 1: a 768 x 768 product alone is 6
  output tiles for 132 SMs), 0.97x at 4096 rows.
* ``sliced`` (bfloat16, float16): one ``F.linear`` over the concatenated weights, its results the column slices of
  the product: 0.85x at 4096 rows, 0.68x at 128, where ``bmm`` was 1.50x and 0.75x. A slice's rows are as far
  apart as the concatenated width, so a ``view`` that merges its last dim with another would refuse it where the
  linear's own result passed: passes/cuda_sibling_linears.py uses this way only where it proved every reader
  safe.

The answer is each linear's own dot products: the result does not depend on the path beyond float reassociation.
A call that does not fit (not a CUDA tensor of the weights' dtype and device, tracked by autograd, the wrong
width) runs each ``F.linear`` as the trace recorded.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .weights_kernel import WeightsKernel

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
BATCHED_DTYPES = (torch.float32,)


class CudaSiblingLinears(WeightsKernel):
    """``tuple(linear(x, weights[i], biases[i]) for i)`` for weights of one shape ``[out, in]``, called as ``k(x)``.
    ``batched``: held stacked as ``[n, in, out]`` (each ``weights[i].t()``); else concatenated as ``[n * out, in]``.

    >>> import torch, torch.nn.functional as F
    >>> w, b, x = torch.randn(3, 4, 8), torch.randn(3, 4), torch.randn(2, 8)
    >>> k = CudaSiblingLinears.of([w[0], w[1], w[2]], [b[0], b[1], b[2]], batched=True)
    >>> outs = k(x)   # a CPU tensor: torch's linears, as recorded
    >>> all(torch.allclose(o, F.linear(x, w[i], b[i])) for i, o in enumerate(outs))
    True
    """

    def __init__(self, weight, bias, count: int, batched: bool):
        self._hold(weight, bias)
        self.count, self.batched = count, batched
        self.width = weight.shape[2] if batched else weight.shape[0] // count   # each linear's out features

    @classmethod
    def of(cls, weights: list, biases: list | None, batched: bool) -> "CudaSiblingLinears":
        """The kernel over the linears' own weights (``[out, in]`` each, any layout) and biases (or None)."""
        if batched:
            weight = torch.stack([w.t() for w in weights]).contiguous()
            bias = None if biases is None else torch.stack(list(biases)).contiguous()
        else:
            weight = torch.cat(weights).contiguous()
            bias = None if biases is None else torch.cat(list(biases)).contiguous()
        return cls(weight, bias, len(weights), batched)

    def describe(self) -> str:
        inputs = self.weight.shape[1]
        how = "one batched matmul" if self.batched else "one linear, its results column slices"
        return f"{self.count} linears ({self.width}, {inputs}) as {how}" + (" + bias" if self.bias is not None else "")

    def moved(self, fn) -> "CudaSiblingLinears":
        """The same kernel over ``fn`` applied to its constants (a ``Module._apply`` conversion)."""
        return CudaSiblingLinears(fn(self.weight), None if self.bias is None else fn(self.bias), self.count,
                                  self.batched)

    def _fits(self, x) -> bool:
        w = self.weight
        return type(x) in (torch.Tensor, torch.nn.Parameter) and x.is_cuda and x.dtype == w.dtype \
            and x.device == w.device and x.layout is torch.strided and x.dim() >= 1 and x.shape[-1] == w.shape[1] \
            and not (x.requires_grad and torch.is_grad_enabled())

    def _own(self, i: int):
        """The weight and bias of linear ``i`` as the trace recorded them (views of what the kernel holds)."""
        w, b, n = self.weight, self.bias, self.width
        if self.batched:
            return w[i].t(), None if b is None else b[i]
        return w[i * n:(i + 1) * n], None if b is None else b[i * n:(i + 1) * n]

    def __call__(self, x):
        if not self._fits(x):
            return tuple(F.linear(x, *self._own(i)) for i in range(self.count))
        if not self.batched:
            return F.linear(x, self.weight, self.bias).split(self.width, -1)
        w, b = self.weight, self.bias
        rows = x.reshape(-1, w.shape[1])
        y = torch.bmm(rows.expand(self.count, *rows.shape), w)
        if b is not None:
            y.add_(b.unsqueeze(1))
        shape = (*x.shape[:-1], self.width)
        return tuple(y[i].view(shape) for i in range(self.count))

    def __repr__(self) -> str:
        return f"<CudaSiblingLinears {self.describe()}>"
