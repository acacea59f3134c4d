"""An optimized program whose kernels hold state-free oneDNN objects (blocked conv regions: passes/blocked_convs.py)
called from many threads at once, each with its own image sizes: every call gives eager's answer."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import tracejit
from tracejit.passes import blocked_timing
from threadlib import run_threads

@pytest.fixture(autouse=True)
def blocked_regardless_of_timing(monkeypatch):
    """These tests pin the blocked rewrite; whether it pays on this machine is passes/blocked_timing.py's
    question (tests/passes/test_blocked_timing.py)."""
    monkeypatch.setattr(blocked_timing, "MEASURE", False)


class Net(nn.Module):
    """A strided stem, a residual pair of 3x3 convs, upsampling to the input's size (not layout-free: blocked)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.a, self.b = nn.Conv2d(32, 32, 3, padding=1), nn.Conv2d(32, 32, 3, padding=1)
        self.head = nn.Conv2d(32, 4, 1)

    def forward(self, x):
        s = torch.relu(self.stem(x))
        y = self.b(torch.relu(self.a(s)))
        y += s
        return F.interpolate(self.head(torch.relu_(y)), size=x.shape[-2:], mode="bilinear", align_corners=False)


def test_blocked_regions_called_from_many_threads_give_eagers_answers():
    torch.manual_seed(5)
    net = Net().eval()
    with torch.no_grad():
        optimized = tracejit.optimize_for_inference(tracejit.trace(net, (torch.randn(1, 3, 128, 128),)))
    assert any(n.op == "tracejit::kernel" and n.attrs["ops"] == "onednn:blocked_conv2d"
               for n in optimized.forward.lowered.graph.nodes)
    inputs = [torch.randn(1 + i % 3, 3, 96 + 16 * (i % 4), 112 - 16 * (i % 3)) for i in range(8)]
    with torch.no_grad():
        expected = [net(x) for x in inputs]
    bad = []

    def worker(k):
        def run():
            for rep in range(12):
                i = (k + rep) % len(inputs)
                with torch.no_grad():
                    got = optimized(inputs[i])
                if got.shape != expected[i].shape or not torch.allclose(got, expected[i], rtol=1e-4, atol=1e-4):
                    bad.append((k, rep))
        return run

    run_threads(*[worker(k) for k in range(6)])
    assert bad == []
