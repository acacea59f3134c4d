"""passes/conv_kernels.py fuses a conv into oneDNN only where that was measured to pay: a dense conv
from ``MIN_DENSE_MACS`` multiply-adds per call, a grouped or depthwise conv always. MobileNet-V3's
squeeze-excite 1x1 convs on 1x1 maps (28 us as oneDNN calls, 6 us as torch's conv2d) stay torch's; the
answers are eager's and torch.jit's on new shapes either way."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from region_testlib import assert_eager_and_jit_answers, jit, lowered, ofi, run_graph
from tracejit.passes.conv_kernels import MIN_DENSE_MACS, SMALL_MAP, conv_kernel_nodes, multiply_adds
from tracejit.kernels.onednn_conv import available

pytestmark = [pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.skipif(not available(), reason="this torch build has no oneDNN convolution op")]


class SqueezeExcite(nn.Module):
    """A depthwise conv, then MobileNet-V3's squeeze-excite: pool to 1x1, two 1x1 convs, scale."""

    def __init__(self, c=96, squeeze=24):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 5, padding=2, groups=c)
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)

    def forward(self, x):
        x = torch.relu(self.dw(x))
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        s = nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))
        return x * s


def fused(traced) -> list:
    graph = run_graph(traced)
    return sorted(lowered(traced).kernel(n).groups for n in conv_kernel_nodes(graph))


def test_small_dense_convs_stay_torchs_and_the_depthwise_conv_is_fused():
    model = SqueezeExcite().eval()
    example = (torch.randn(1, 96, 8, 8),)
    traced = ofi(model, example)
    assert fused(traced) == [96]   # the depthwise conv only: the 1x1 convs do 2304 multiply-adds each
    assert_eager_and_jit_answers(traced, model, jit(model, example), [(1, 96, 8, 8), (3, 96, 5, 7)],
                                 rtol=1e-4, atol=1e-5)


def test_a_large_dense_conv_is_fused_and_the_same_conv_on_a_small_map_is_not():
    model = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU()).eval()
    large, small = (torch.randn(1, 64, 32, 32),), (torch.randn(1, 64, 4, 4),)
    assert multiply_adds(model[0].weight, 1, 1, 1, (1, 64, 32, 32)) == 64 * 64 * 9 * 32 * 32 >= MIN_DENSE_MACS
    assert multiply_adds(model[0].weight, 1, 1, 1, (1, 64, 4, 4)) < MIN_DENSE_MACS
    big, little = ofi(model, large), ofi(model, small)
    assert fused(big) == [1] and fused(little) == []
    for traced in (big, little):
        assert_eager_and_jit_answers(traced, model, jit(model, large), [(1, 64, 32, 32), (2, 64, 6, 9)],
                                     rtol=1e-4, atol=1e-4)


def test_multiply_adds_follow_stride_padding_dilation_and_an_unfixed_size_counts_as_one():
    w = torch.empty(8, 4, 3, 3)
    assert multiply_adds(w, 2, 1, 1, (2, 4, 9, 9)) == w.numel() * 2 * 5 * 5
    assert multiply_adds(w, 1, 0, 2, (1, 4, 9, 9)) == w.numel() * 5 * 5
    assert multiply_adds(w, 1, 1, 1, (None, 4, 9, 9)) == w.numel() * 9 * 9


class Head(nn.Module):
    """A detection head's shape: convs on a small map, then a ``view`` that reads the conv's strides (the graph
    is not layout-free, so a channels-last result would be refused or read wrongly)."""

    def __init__(self, c=512, convs=(1, 3)):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(c, c, k, padding=k // 2) for k in convs)

    def forward(self, x):
        for conv in self.convs:
            x = torch.relu(conv(x))
        n, c, h, w = x.shape
        return x.view(n, c, h * w).transpose(1, 2) * 2


def kernel_sizes(traced) -> list:
    return [tuple(lowered(traced).kernel(n).weight.shape[2:]) for n in conv_kernel_nodes(run_graph(traced))]


def test_in_a_graph_that_reads_strides_only_1x1_convs_on_small_maps_are_fused_and_give_nchw():
    """Where the graph reads strides (passes/conv_layout.py: not layout-free), a conv is fused only where it is a
    1x1 unstrided conv under batch 16 on a map of at most SMALL_MAP positions (torch runs it without oneDNN;
    oneDNN ran it 5-7x faster, as close to float64), and returns torch's NCHW result. The 3x3 conv on the same
    small map (oneDNN faster but further from float64) and both convs on a larger map stay torch's. Answers:
    eager's and torch.jit's, on new batch and map sizes."""
    model = Head().eval()
    small, large = (torch.randn(1, 512, 4, 4),), (torch.randn(1, 512, 24, 24),)
    assert 4 * 4 <= SMALL_MAP < 24 * 24
    assert multiply_adds(model.convs[0].weight, 1, 0, 1, (1, 512, 4, 4)) >= MIN_DENSE_MACS
    on_small, on_large = ofi(model, small), ofi(model, large)
    assert kernel_sizes(on_small) == [(1, 1)]
    assert kernel_sizes(on_large) == []
    kernel = lowered(on_small).kernel(conv_kernel_nodes(run_graph(on_small))[0])
    assert kernel.contiguous and kernel(torch.randn(1, 512, 4, 4)).is_contiguous()
    for traced, example in ((on_small, small), (on_large, large)):
        assert_eager_and_jit_answers(traced, model, jit(model, example), [(1, 512, 4, 4), (3, 512, 5, 7)],
                                     rtol=1e-4, atol=1e-4)
