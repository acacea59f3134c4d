"""A CUDA linear with a frozen weight stored transposed, run as torch.jit's frozen program runs it: ``x @ Wt``
(cuBLAS's plain "nn" GEMM), then the bias added in place.

``F.linear(x, W, b)`` on CUDA hands the bias to cuBLASLt's epilogue, and for a few hundred rows cuBLAS picks
split-K or unaligned CUTLASS kernels for it: BERT-base at batch 1 (128 rows) spends 2.9 ms of GPU time per call
there, against 1.4 ms for torch.jit's frozen program, whose FrozenLinearTranspose pass calls ``matmul`` on the
transposed weight and adds the bias apart (H200, fp32 without TF32, bench/gpu_peer_profile.py). For many rows
the separate bias pass costs memory traffic the epilogue saves: a call with more than ``MAX_ROWS`` rows runs
``F.linear`` as the trace recorded (measured at 128 rows; 4096 rows, BERT at batch 32, keep torch's linear).

Float32 only: in bfloat16 cuBLASLt's epilogue kernels win (``x @ Wt`` + bias took 1.46x ``F.linear``'s GPU time for
three 768 x 768 linears at 128 rows, 1.66x at 4096, H200), so a bfloat16 or float16 linear keeps ``F.linear``.

The answer does not depend on the path beyond float reassociation of the bias add: a call that does not fit (not
a CUDA tensor of the weight's dtype and device, tracked by autograd, more rows than ``MAX_ROWS``) runs
``F.linear``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .weights_kernel import WeightsKernel

DTYPES = (torch.float32,)   # bfloat16: 1.46x F.linear at 128 rows (bench/gpu_sibling_linears.py), so it keeps F.linear
MAX_ROWS = 1024


class CudaLinear(WeightsKernel):
    """``linear(x, weight, bias)`` with ``weight`` stored transposed (``weight.t()`` contiguous), called as ``k(x)``."""

    def __init__(self, weight, bias):
        self._hold(weight, bias)
        self._transposed = weight.dim() == 2 and weight.t().is_contiguous()   # (a conversion may lay it out again)

    def describe(self) -> str:
        return f"linear {tuple(self.weight.shape)} as matmul" + (" + bias" if self.bias is not None else "")

    def moved(self, fn) -> "CudaLinear":
        """The same kernel over ``fn`` applied to its constants (a ``Module._apply`` conversion)."""
        return CudaLinear(fn(self.weight), None if self.bias is None else fn(self.bias))

    def _fits(self, x) -> bool:
        w = self.weight
        return type(x) in (torch.Tensor, torch.nn.Parameter) and x.is_cuda and x.dtype == w.dtype \
            and x.device == w.device and x.layout is torch.strided and x.dim() >= 1 \
            and not (x.requires_grad and torch.is_grad_enabled()) and x.numel() <= MAX_ROWS * x.shape[-1] \
            and self._transposed

    def __call__(self, x):
        if self._fits(x):
            y = torch.matmul(x, self.weight.t())
            return y if self.bias is None else y.add_(self.bias)
        return F.linear(x, self.weight, self.bias)

    def __repr__(self) -> str:
        return f"<CudaLinear {self.describe()}>"
