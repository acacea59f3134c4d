"""Sibling CUDA linears (several linears of one input with weights of one shape: BERT's query, key and value) run
as one batched GEMM: ``bmm(x, W)`` over the stacked transposed weights, then the biases added in place.

One launch of ``n`` GEMMs fills the GPU where each alone leaves most of it idle: at BERT-base's batch 1 (128
rows) a 768 x 768 product is 6 output tiles of 128 x 128 for 132 SMs. Each output is a contiguous block of the
batched result, shaped as the linear's own output, so whatever reads it sees the strides it saw in the trace
(no column slice of a concatenated product, which a later ``view`` could refuse).

The answer is each linear's own dot products: the result does not depend on the path beyond float reassociation.
A call that does not fit (not a CUDA tensor of the weights' dtype and device, tracked by autograd, the wrong
width) runs each ``F.linear`` as the trace recorded.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .weights_kernel import WeightsKernel

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class CudaSiblingLinears(WeightsKernel):
    """``tuple(linear(x, weights[i], biases[i]) for i)`` for weights of one shape ``[out, in]``, held stacked as
    ``[n, in, out]`` (each ``weights[i].t()``), called as ``k(x)``.

    >>> import torch, torch.nn.functional as F
    >>> w, b, x = torch.randn(3, 4, 8), torch.randn(3, 4), torch.randn(2, 8)
    >>> k = CudaSiblingLinears.of([w[0], w[1], w[2]], [b[0], b[1], b[2]])
    >>> outs = k(x)   # a CPU tensor: torch's linears, as recorded
    >>> all(torch.allclose(o, F.linear(x, w[i], b[i])) for i, o in enumerate(outs))
    True
    """

    def __init__(self, stacked, biases):
        self._hold(stacked, biases)   # [n, in, out] and [n, out] (or None)
        self.count = stacked.shape[0]

    @classmethod
    def of(cls, weights: list, biases: list | None) -> "CudaSiblingLinears":
        """The kernel over the linears' own weights (``[out, in]`` each, any layout) and biases (or None)."""
        stacked = torch.stack([w.t() for w in weights]).contiguous()
        return cls(stacked, None if biases is None else torch.stack(list(biases)).contiguous())

    def describe(self) -> str:
        n, k, m = self.weight.shape
        return f"{n} linears ({m}, {k}) as one batched matmul" + (" + bias" if self.bias is not None else "")

    def moved(self, fn) -> "CudaSiblingLinears":
        """The same kernel over ``fn`` applied to its constants (a ``Module._apply`` conversion)."""
        return CudaSiblingLinears(fn(self.weight), None if self.bias is None else fn(self.bias))

    def _fits(self, x) -> bool:
        w = self.weight
        return type(x) in (torch.Tensor, torch.nn.Parameter) and x.is_cuda and x.dtype == w.dtype \
            and x.device == w.device and x.layout is torch.strided and x.dim() >= 1 and x.shape[-1] == w.shape[1] \
            and not (x.requires_grad and torch.is_grad_enabled())

    def __call__(self, x):
        w, b = self.weight, self.bias
        if not self._fits(x):
            return tuple(F.linear(x, w[i].t(), None if b is None else b[i]) for i in range(self.count))
        rows = x.reshape(-1, w.shape[1])
        y = torch.bmm(rows.expand(self.count, *rows.shape), w)
        if b is not None:
            y.add_(b.unsqueeze(1))
        shape = (*x.shape[:-1], w.shape[2])
        return tuple(y[i].view(shape) for i in range(self.count))

    def __repr__(self) -> str:
        return f"<CudaSiblingLinears {self.describe()}>"
