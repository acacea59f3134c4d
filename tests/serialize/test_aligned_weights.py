"""Loaded weights sit where torch's own allocator would put them (64-byte aligned: file_format.ALIGN), so a loaded
convolution net answers bit for bit what the traced program (and eager) answers. oneDNN's convolution takes
another path for a weight that is not 64-byte aligned and answers 1-3 ulps away (timm's LCNet, ReXNet, MixNet
loaded from a file: up to 1.2e-6 from eager, bench/serve_corpus19.py). The writer aligns the data (header padded,
tensors whose size is a multiple of 64 bytes first) and stays a file the safetensors library reads; the loader
copies what is not aligned (older files, the other tensors, a file read from a file object)."""
from __future__ import annotations

import io
import importlib.util
import struct

import pytest
import torch
from torch import nn

import tracejit
from filesurgery import fix_crc


class SqueezeExcite(nn.Module):
    """timm's SE block: 1x1 convolutions of the pooled features (the convolutions that answered 1-3 ulps off)."""

    def __init__(self, c):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(torch.relu(self.reduce(s))))


def _net():
    torch.manual_seed(0)
    layers, c = [nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.Hardswish()], 8
    for out, stride in ((16, 1), (64, 2), (128, 2)):   # depthwise then pointwise, as LCNet / MobileNet
        layers += [nn.Conv2d(c, c, 3, stride, 1, groups=c, bias=False), nn.BatchNorm2d(c), nn.Hardswish(),
                   nn.Conv2d(c, out, 1, bias=False), nn.BatchNorm2d(out), nn.Hardswish()]
        c = out
    net = nn.Sequential(*layers, SqueezeExcite(c), nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, 320, 1), nn.Hardswish(),
                        nn.Flatten(), nn.Linear(320, 10)).eval()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return net


def _weights_aligned(loaded) -> bool:
    return all(t.data_ptr() % 64 == 0 for t in [*loaded.parameters(), *loaded.buffers()] if t.numel())


@pytest.mark.parametrize("how", ["path", "file object", "older layout"])
def test_a_loaded_conv_net_answers_bit_for_bit(how, tmp_path):
    net = _net()
    with torch.no_grad():
        traced = tracejit.trace(net, torch.randn(1, 3, 64, 64))
    path = tmp_path / "net.tj"
    tracejit.save(traced, path)
    if how == "older layout":   # as an older writer could leave it: the data 4 bytes past a multiple of 16
        raw = path.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        path.write_bytes(fix_crc(struct.pack("<Q", n + 4) + raw[8:8 + n] + b" " * 4 + raw[8 + n:]))
    loaded = tracejit.load(path if how != "file object" else io.BytesIO(path.read_bytes()))
    assert _weights_aligned(loaded)
    for x in (torch.randn(2, 3, 64, 64), torch.randn(3, 3, 80, 96)):   # new inputs, another size
        with torch.no_grad():
            want, got, eager = traced(x), loaded(x), net(x)
        assert torch.equal(got, want), (got - want).abs().max()
        assert torch.equal(got, eager), (got - eager).abs().max()


def test_the_aligned_file_is_safetensors_with_aligned_data(tmp_path):
    traced = tracejit.trace(_net(), torch.randn(1, 3, 32, 32))
    path = tmp_path / "net.tj"
    tracejit.save(traced, path)
    raw = path.read_bytes()
    start = 8 + int.from_bytes(raw[:8], "little")
    assert start % 64 == 0
    if importlib.util.find_spec("safetensors") is None:
        pytest.skip("needs safetensors")
    from safetensors.torch import load
    tensors = load(raw)
    state = traced.state_dict()
    assert set(tensors) == set(state)
    for k, v in state.items():
        assert torch.equal(tensors[k], v)
