"""Folding precision against a float64 reference (issue #25 item 3, zoo7): a conv followed by a batch norm
(folded by passes/fold_conv_bn) or by torchvision's ``FrozenBatchNorm2d`` pattern (``x * scale + bias``,
scale = weight * (running_var + eps).rsqrt(): what its detection backbones use), with extreme statistics
(tiny variances, large means and weights), is no further from the float64 model than torch.jit's freeze
+ optimize_for_inference, on inputs other than the example's (bound: ``SLACK`` times jit's error plus
``ULPS`` float32 ulps of the output, as bench_zoo.EXACT_SLACK)."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import tracejit

SLACK, ULPS = 1.25, 8


class FrozenBatchNorm2d(nn.Module):
    """torchvision.ops.FrozenBatchNorm2d's forward (statistics as buffers, no batch_norm op)."""

    def __init__(self, n: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        for name in ("weight", "bias", "running_mean", "running_var"):
            self.register_buffer(name, torch.zeros(n))

    def forward(self, x):
        w, b = self.weight.reshape(1, -1, 1, 1), self.bias.reshape(1, -1, 1, 1)
        rv, rm = self.running_var.reshape(1, -1, 1, 1), self.running_mean.reshape(1, -1, 1, 1)
        scale = w * (rv + self.eps).rsqrt()
        return x * scale + (b - rm * scale)


def _conv_norm_stack(norm: type, channels: int = 16, seed: int = 0) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(4, channels, 3, padding=1, bias=False), norm(channels), nn.ReLU(),
                          nn.Conv2d(channels, channels, 3, padding=1), norm(channels)).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (FrozenBatchNorm2d, nn.BatchNorm2d)):
                m.running_mean.copy_(torch.randn(channels, generator=gen) * 30)
                m.running_var.copy_(torch.rand(channels, generator=gen) ** 4 * 1e-2 + 1e-6)   # scales up to ~1e3
                m.weight.copy_(torch.randn(channels, generator=gen) * 3)
                m.bias.copy_(torch.randn(channels, generator=gen))
    return model


@pytest.mark.parametrize("norm", [FrozenBatchNorm2d, nn.BatchNorm2d], ids=["frozen_bn", "batch_norm"])
def test_conv_norm_with_extreme_statistics_as_close_to_float64_as_jit_freeze(norm):
    model = _conv_norm_stack(norm)
    gen = torch.Generator().manual_seed(7)
    example = (torch.randn(1, 4, 8, 8, generator=gen) * 5,)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimized = tracejit.optimize_for_inference(tracejit.trace(model, example, check_trace=False))
        jit = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, example, check_trace=False)))
        wide = copy.deepcopy(model).double()
        if norm is nn.BatchNorm2d:
            assert not any("batch_norm" in n.op for n in optimized.graph.nodes), "the fold must apply"
        inputs = [torch.randn(2, 4, 10, 6, generator=gen) * 5, torch.randn(1, 4, 8, 8, generator=gen) * 5]
        assert not torch.allclose(model(inputs[0][:1, :, :8, :6]), model(inputs[1][:, :, :8, :6]))
        for x in inputs:
            want = wide(x.double())
            err, jit_err = ((p(x).double() - want).abs().max().item() for p in (optimized, jit))
            bound = SLACK * jit_err + ULPS * torch.finfo(torch.float32).eps * want.abs().max().item()
            assert err <= bound, (f"optimized differs from float64 by {err:.3g} on {tuple(x.shape)}, torch.jit "
                                  f"freeze by {jit_err:.3g} (bound {bound:.3g})")
