"""A CUDA 2-d convolution with its relu (and a residual add before it) in one cuDNN call.

``relu(conv2d(x, W, b) [+ r])`` runs as ``torch.cudnn_convolution_relu`` / ``cudnn_convolution_add_relu``, the
ops torch.jit's frozen CUDA program uses: one kernel where torch's ops run the conv, the add and the relu apart.
Measured on an H200 (bench/gpu_peer_profile.py, ResNet-50 with folded batch norms, fp32 without TF32): batch 1
2.90 -> 2.21 ms, batch 32 11.63 -> 9.86 ms (jit freeze 9.90), batch 32 bf16 4.55 -> 3.71 ms.

The answer does not depend on the path: a call that does not fit (not a CUDA tensor of the weight's dtype and
device, tracked by autograd, a residual of another shape, dtype or device, an error in cuDNN) runs the ops the
trace recorded. ``fusion_keeps_nan(device)`` asks the device once whether the fused relu keeps a NaN as
``torch.relu`` does and adds the residual and bias as eager does (a 2x2 probe); where it does not (or the op is
missing), passes/cuda_conv_kernels.py fuses nothing.
"""
from __future__ import annotations

import functools

import torch

from .weights_kernel import WeightsKernel

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@functools.lru_cache(maxsize=None)
def fusion_keeps_nan(device: str) -> bool:
    """Do both fused ops run on ``device``, give eager's values (bias and residual added, then relu) and keep a
    NaN through their relu as eager's relu does? Asked once per device with a 1x1 convolution of a 2x2 image
    (default-deny: any error answers False)."""
    try:
        dev = torch.device(device)
        if dev.type != "cuda" or not torch.cuda.is_available():
            return False
        x = torch.tensor([[[[float("nan"), 1.0], [2.0, -3.0]]]], device=dev)
        w = torch.full((1, 1, 1, 1), 2.0, device=dev)
        b = torch.full((1,), 0.5, device=dev)
        r = torch.tensor([[[[1.0, -5.0], [0.25, 7.0]]]], device=dev)
        got = (torch.cudnn_convolution_relu(x, w, b, [1, 1], [0, 0], [1, 1], 1),
               torch.cudnn_convolution_add_relu(x, w, r, 1.0, b, [1, 1], [0, 0], [1, 1], 1))
        want = (torch.relu(torch.conv2d(x, w, b)), torch.relu(torch.conv2d(x, w, b) + r))
        return all(bool(torch.isnan(g[0, 0, 0, 0])) and torch.equal(g.flatten()[1:], e.flatten()[1:])
                   for g, e in zip(got, want))
    except Exception:  # noqa: BLE001  (no such op, no cuDNN, a driver error: no fusion)
        return False


def _pair(v) -> list[int]:
    return [int(v), int(v)] if isinstance(v, int) else [int(x) for x in v]


class CudnnConvRelu(WeightsKernel):
    """``relu(conv2d(x, weight, bias, ...) [+ residual])``, called as ``conv(x)`` or ``conv(x, residual)``."""

    def __init__(self, weight, bias, stride, padding, dilation, groups: int, *, residual: bool,
                 inplace_add: bool = True):
        self._hold(weight, bias)
        self.stride, self.padding, self.dilation = _pair(stride), _pair(padding), _pair(dilation)
        self.groups, self.residual, self.inplace_add = int(groups), residual, inplace_add

    def describe(self) -> str:
        return "conv2d" + ("+add" if self.residual else "") + "+relu"

    def moved(self, fn) -> "CudnnConvRelu":
        """The same kernel over ``fn`` applied to its constants (a ``Module._apply`` conversion)."""
        return CudnnConvRelu(fn(self.weight), None if self.bias is None else fn(self.bias), self.stride,
                             self.padding, self.dilation, self.groups, residual=self.residual,
                             inplace_add=self.inplace_add)

    def _fits(self, t) -> bool:
        w = self.weight
        return type(t) in (torch.Tensor, torch.nn.Parameter) and t.is_cuda and t.dtype == w.dtype \
            and t.device == w.device and t.layout is torch.strided and not (t.requires_grad and torch.is_grad_enabled())

    def __call__(self, x, residual=None):
        if self._fits(x) and x.dim() == 4:
            try:
                if not self.residual:
                    return torch.cudnn_convolution_relu(x, self.weight, self.bias, self.stride, self.padding,
                                                        self.dilation, self.groups)
                if self._fits(residual) and residual.shape == self._output_shape(x):
                    return torch.cudnn_convolution_add_relu(x, self.weight, residual, 1.0, self.bias, self.stride,
                                                            self.padding, self.dilation, self.groups)
            except RuntimeError:   # e.g. an empty batch: torch's ops give their answer or error
                pass
        return self._fallback(x, residual)

    def _output_shape(self, x) -> tuple:
        n, _, h, w = x.shape
        kh, kw = self.weight.shape[2:]
        size = [(s + 2 * p - d * (k - 1) - 1) // st + 1
                for s, k, p, d, st in zip((h, w), (kh, kw), self.padding, self.dilation, self.stride)]
        return (n, self.weight.shape[0], *size)

    def _fallback(self, x, residual):
        """The ops the trace recorded."""
        y = torch.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        if self.residual:
            y = y.add_(residual) if self.inplace_add else torch.add(y, residual)
        return torch.relu(y)

    def __repr__(self) -> str:
        return f"<CudnnConvRelu {self.describe()} {tuple(self.weight.shape)}>"
