"""passes/conv_layout.py: conv weights channels-last where nothing reads strides; same numbers."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.passes.conv_layout import channels_last_weights

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class Residual(nn.Module):
    """conv-bn-relu, a residual add, max pooling, global pooling and a linear head (ResNet's ops)."""

    def __init__(self, flatten_with_view=False, return_map=False):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2))
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 1))
        self.head = nn.Linear(8 * 4 if flatten_with_view else 8, 5)
        self.flatten_with_view, self.return_map = flatten_with_view, return_map
        with torch.no_grad():
            self.stem[1].running_mean.uniform_(-1, 1)
            self.stem[1].running_var.uniform_(0.5, 2)

    def forward(self, x):
        h = self.stem(x)
        h = torch.relu(h + self.body(h))
        if self.return_map:
            return h
        if self.flatten_with_view:   # view needs NCHW strides
            return self.head(nn.functional.adaptive_avg_pool2d(h, 2).view(h.shape[0], -1))
        return self.head(nn.functional.adaptive_avg_pool2d(h, 1).flatten(1))


def ofi(m, x):
    with torch.no_grad():
        return tracejit.optimize_for_inference(tracejit.trace(m.eval(), (x,)))


def test_conv_net_runs_channels_last_with_eagers_and_jits_answers_on_new_sizes():
    m = Residual().eval()
    x = torch.randn(1, 3, 16, 16)
    fast = ofi(m, x)
    assert channels_last_weights(fast.graph) == 2   # the 3x3 convs (a 1x1 weight is both layouts at once)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = torch.jit.trace(m, x)
    for shape in ((1, 3, 16, 16), (2, 3, 24, 20)):
        y = torch.randn(shape)
        with torch.no_grad():
            out = fast(y)
            torch.testing.assert_close(out, m(y), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(out, ref(y), rtol=1e-4, atol=1e-5)
        assert out.is_contiguous()
    buf = io.BytesIO()
    tracejit.save(fast, buf)
    buf.seek(0)
    with torch.no_grad():
        torch.testing.assert_close(tracejit.load(buf)(y), m(y), rtol=1e-4, atol=1e-5)


def test_not_applied_where_strides_would_show():
    m = Residual(flatten_with_view=True).eval()   # view() needs NCHW strides
    x = torch.randn(1, 3, 16, 16)
    fast = ofi(m, x)
    assert channels_last_weights(fast.graph) == 0
    y = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        out = fast(y)
        torch.testing.assert_close(out, m(y), rtol=1e-4, atol=1e-5)
    assert out.is_contiguous()


def test_a_feature_map_output_is_returned_contiguous_as_eagers():
    m = Residual(return_map=True).eval()
    x = torch.randn(1, 3, 16, 16)
    fast = ofi(m, x)
    assert channels_last_weights(fast.graph) > 0                       # the net runs channels-last inside
    assert [n.op for n in fast.graph.nodes][-1] == "aten::contiguous.default"   # one copy at the exit
    with torch.no_grad():
        for shape in [(2, 3, 16, 16), (1, 3, 12, 20)]:
            y = torch.randn(shape)
            out, want = fast(y), m(y)
            torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
            assert out.is_contiguous() and out.stride() == want.stride()


class InPlaceOutput(nn.Module):
    """Returns a feature map an in-place op made: its result is its input, so the pass keeps out."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x).relu_()


def test_a_feature_map_made_in_place_leaves_the_graph_as_it_was():
    m = InPlaceOutput().eval()
    fast = ofi(m, torch.randn(1, 3, 8, 8))
    assert channels_last_weights(fast.graph) == 0
    with torch.no_grad():
        y = torch.randn(2, 3, 9, 9)
        torch.testing.assert_close(fast(y), m(y), rtol=1e-4, atol=1e-5)
