"""A linear layer with a constant weight run by oneDNN's matmul, with relu / gelu fused.

On this AMD EPYC torch's ``linear`` runs MKL's sgemm at about 150 GFLOP/s, while oneDNN's own
kernels (``torch.ops.mkldnn._linear_pointwise``, the op torch's CPU compiler emits for frozen
linears) reach about 330: a BERT feed-forward layer (128x768 by 3072) takes 1.8 ms instead of
4.1. The weight is reordered into oneDNN's blocked layout once (``_reorder_linear_weight``, a
copy of the weight kept beside it), which saves oneDNN that reorder on every call: 7-16% on
BERT's linears. oneDNN's call costs more than torch's, so the kernel uses it only when the product has at
least ``MIN_MACS`` multiply-adds, and torch's ``linear`` below that: at two threads, median of 11 interleaved
rounds (bench/RESULTS.md, eighteenth pass), oneDNN took 1.03-1.37x torch's time from 1.0M to 2.2M
multiply-adds (136x64 by 192, a tiny ViT's qkv at batch 8: 1.12x) and 0.50-1.02x from 3.1M on. With one
thread (``torch.set_num_threads(1)``, a server running one model per core) oneDNN's throughput is no better
than torch's below about 8M multiply-adds (best of 15 interleaved rounds here: 1M 45 vs 28 us, 4M 98 vs 88,
8M 169 vs 170, 17M 316 vs 337, 34M 614 vs 674, 302M 27 vs 37 ms; the optimized Mistral / Qwen2 decoders at
batch 8 ran 1.5x their traced programs' time), so a one-thread call takes oneDNN from
``MIN_MACS_ONE_THREAD`` on. These bounds were read on one CPU; passes/linear_kernels.py uses ``MIN_MACS`` only as a
pre-filter and hands a linear to this kernel where, timed at its traced shape on the machine that lowers the
program, the kernel is faster (passes/linear_timing.py).

The answer does not depend on the path: a call that does not fit (not a plain CPU float32
tensor, tracked by autograd, too small, an error in oneDNN) runs the recorded ops.

Example:
    >>> import torch
    >>> from tracejit.kernels.onednn_linear import OneDnnLinear
    >>> w, b = torch.randn(512, 256), torch.randn(512)
    >>> linear = OneDnnLinear(w, b, "gelu")
    >>> x = torch.randn(2, 64, 256)
    >>> want = torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))
    >>> torch.allclose(linear(x), want, rtol=1e-4, atol=1e-4)
    True
"""
from __future__ import annotations

import torch

from .onednn_activation import ACTIVATIONS, NAN_TO_NUMBER, label, recorded
from .onednn_conv import packable, plain_f32
from .weights_kernel import WeightsKernel

MIN_MACS = 1 << 22   # below about 4M multiply-adds torch's linear is as fast or faster (oneDNN's call overhead)
MIN_MACS_ONE_THREAD = 1 << 23   # with one thread: below about 8M multiply-adds torch's linear is as fast or faster
PACK_ROWS = 128      # the row count oneDNN picks the weight layout for; any count above 1 gave the same speed


_threads = torch.get_num_threads


def available() -> bool:
    """Does this torch build have oneDNN's fused linear op?"""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class OneDnnLinear(WeightsKernel):
    """``activation(linear(x, weight, bias), *scalars)``, called as ``linear(x)``; ``activation`` is a
    key of kernels/onednn_activation.py's ``ACTIVATIONS``."""

    def __init__(self, weight, bias, activation: str = "none", scalars: tuple = ()):
        self._hold(weight, bias)
        self.activation, self.scalars = activation, tuple(scalars)
        self._attr, self._algorithm, _ = ACTIVATIONS[activation]
        self.drops_nan = activation in NAN_TO_NUMBER   # see backends/fallback.py's finite-input check
        self._packed = self._pack()
        self._min_elements = -(-MIN_MACS // max(1, weight.shape[0])) if weight.dim() == 2 else 0
        self._min_elements_one_thread = -(-MIN_MACS_ONE_THREAD // max(1, weight.shape[0])) if weight.dim() == 2 else 0

    def describe(self) -> str:
        return "linear" + label(self.activation)

    def moved(self, fn) -> "OneDnnLinear":
        """The same kernel over ``fn`` applied to its constants (a ``Module._apply`` conversion)."""
        return OneDnnLinear(fn(self.weight), None if self.bias is None else fn(self.bias), self.activation,
                            self.scalars)

    def _pack(self):
        """The weight in oneDNN's blocked layout, or None when the constants do not fit the fused op."""
        if not (available() and packable(self.weight, 2, self.constants)):
            return None
        try:
            return torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), PACK_ROWS)
        except RuntimeError:
            return None

    def __call__(self, x):
        packed = self._packed
        least = self._min_elements if _threads() > 1 else self._min_elements_one_thread
        if packed is not None and plain_f32(x) and x.numel() >= least \
                and not (x.requires_grad and torch.is_grad_enabled()):
            try:
                return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, self._attr, list(self.scalars),
                                                          self._algorithm)
            except RuntimeError:   # e.g. the wrong feature size: torch's ops give their answer or error
                pass
        return recorded(self.activation, torch._C._nn.linear(x, self.weight, self.bias), self.scalars)

    def __repr__(self) -> str:
        return f"<OneDnnLinear {self.describe()} {tuple(self.weight.shape)}>"
