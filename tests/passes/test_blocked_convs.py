"""passes/blocked_convs.py: a conv net that cannot run channels-last (an ``interpolate`` reads its feature map)
keeps its feature maps in oneDNN's blocked layout from conv to conv. The answers are eager's and torch.jit's on
new shapes; a blocked conv gives torch's conv2d bits; the pass stays off where a conversion could lose a write.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import tracejit
from region_testlib import jit, lowered, ofi, run_graph
from tracejit.kernels.onednn_blocked import BlockedConv, ToBlocked, ToDense
from tracejit.kernels.onednn_conv import available
from tracejit.passes import blocked_convs, blocked_timing
from tracejit.passes.blocked_convs import MIN_CONVS, MIN_DENSE_MACS

pytestmark = [pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.skipif(not available(), reason="this torch build has no oneDNN convolution op")]


@pytest.fixture(autouse=True)
def any_conv_size(monkeypatch):
    """These small nets test the regions' logic: their convs count as large enough (the size gate has its own
    test, at the real threshold)."""
    monkeypatch.setattr(blocked_convs, "MIN_DENSE_MACS", 0)
    monkeypatch.setattr(blocked_timing, "MEASURE", False)   # the timing gate has its own tests below


def blocked_ops(traced) -> list:
    return sorted(n.attrs["ops"] for n in run_graph(traced).nodes
                  if n.op == "tracejit::kernel" and n.attrs["ops"].startswith("onednn:blocked_conv2d"))


class Block(nn.Module):
    """A ResNet bottleneck with a dilated 3x3 conv (FCN's layer4): conv-bn-relu x3, ``out += identity``."""

    def __init__(self, c=32, mid=16, dilation=2):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.c2, self.b2 = nn.Conv2d(mid, mid, 3, padding=dilation, dilation=dilation, bias=False), nn.BatchNorm2d(mid)
        self.c3, self.b3 = nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        out = torch.relu(self.b1(self.c1(x)))
        out = torch.relu(self.b2(self.c2(out)))
        out = self.b3(self.c3(out))
        out += x
        return torch.relu_(out)


class Segmenter(nn.Module):
    """FCN in small: a strided stem, max pool, two bottlenecks, a head, and bilinear upsampling to the input's size
    (``interpolate`` reads strides: the graph is not layout-free)."""

    def __init__(self, features=False):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(Block(), Block(dilation=1))
        self.head = nn.Sequential(nn.Conv2d(32, 16, 3, padding=1), nn.ReLU(), nn.Dropout(0.1), nn.Conv2d(16, 4, 1))
        self.features = features
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2.0), m.weight.data.uniform_(0.5, 1.5)

    def forward(self, x):
        f = self.blocks(self.stem(x))
        y = F.interpolate(self.head(f), size=x.shape[-2:], mode="bilinear", align_corners=False)
        return (y, f, f, f[:, :4]) if self.features else y


def test_a_segmenter_runs_blocked_and_gives_eager_and_jit_answers_on_new_shapes():
    torch.manual_seed(0)
    model = Segmenter().eval()
    example = (torch.randn(2, 3, 32, 32),)
    traced, ref = ofi(model, example), jit(model, example)
    assert len(blocked_ops(traced)) == 9   # every conv of the net
    kinds = [n.attrs["ops"] for n in run_graph(traced).nodes if n.op == "tracejit::kernel"]
    assert kinds.count("onednn:to_blocked") == 1 and kinds.count("onednn:to_dense") == 1
    with torch.no_grad():
        for shape in [(3, 3, 40, 48), (1, 3, 24, 24), (5, 3, 32, 32)]:
            x = torch.randn(shape)
            got = traced(x)
            assert got.shape == (shape[0], 4, *shape[2:]) and not got.is_mkldnn and got.is_contiguous()
            torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(got, ref(x), rtol=1e-4, atol=1e-4)


def test_region_outputs_come_back_dense_and_one_tensor_returned_twice_or_viewed_stays_one():
    torch.manual_seed(0)
    model = Segmenter(features=True).eval()
    traced = ofi(model, (torch.randn(2, 3, 32, 32),))
    assert blocked_ops(traced)
    x = torch.randn(3, 3, 40, 40)
    with torch.no_grad():
        y, f, g, corner = traced(x)
        want = model(x)
    assert f is g and not f.is_mkldnn and f.is_contiguous()
    # eager's fourth output is a view of its second: so is ours (one dense copy per tensor)
    assert want[3].untyped_storage().data_ptr() == want[1].untyped_storage().data_ptr()
    assert corner.untyped_storage().data_ptr() == f.untyped_storage().data_ptr()
    torch.testing.assert_close(corner, want[3], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(f, want[1], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(y, want[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 1, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1), (1, 4, 4, 1),
                                                            (1, 1, 1, 4), (2, 0, 1, 1)])
def test_a_blocked_conv_gives_torchs_conv2d_bits(stride, padding, dilation, groups):
    torch.manual_seed(0)
    w, b = torch.randn(32, 16 // groups, 3, 3), torch.randn(32)
    conv = BlockedConv(w, b, stride, padding, dilation, groups)
    for shape in [(2, 16, 12, 12), (8, 16, 9, 7)]:
        x = torch.randn(shape)
        want = torch.conv2d(x, w, b, stride, padding, dilation, groups)
        assert torch.equal(ToDense()(conv(ToBlocked()(x))), want)
        assert torch.equal(conv(x), want)   # a plain input: torch's conv2d


def test_calls_that_do_not_fit_run_torchs_ops():
    """Tracked by autograd: plain tensors all the way (the gradient is eager's); an empty batch: eager's shape."""
    torch.manual_seed(0)
    model = Segmenter().eval()
    traced = ofi(model, (torch.randn(2, 3, 32, 32),))
    assert blocked_ops(traced)
    x = torch.randn(2, 3, 24, 24, requires_grad=True)
    got = traced(x)
    got.square().sum().backward()
    grad, x.grad = x.grad, None
    want = model(x)
    want.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grad, x.grad, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        empty = torch.randn(0, 3, 24, 24)
        assert traced(empty).shape == model(empty).shape == (0, 4, 24, 24)


def test_small_convs_stay_torchs(monkeypatch):
    """A region whose median conv is under ``MIN_DENSE_MACS`` multiply-adds at its traced size stays torch's
    (measured: ShuffleNet-V2 at batch 1, 64 px, 0.04M per conv, ran 1.7x slower blocked); larger images of the
    same net run blocked."""
    monkeypatch.setattr(blocked_convs, "MIN_DENSE_MACS", MIN_DENSE_MACS)
    torch.manual_seed(0)
    model = Segmenter().eval()
    assert blocked_ops(ofi(model, (torch.randn(2, 3, 32, 32),))) == []
    traced = ofi(model, (torch.randn(2, 3, 256, 256),))
    assert len(blocked_ops(traced)) == 9
    x = torch.randn(1, 3, 200, 224)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), model(x), rtol=1e-4, atol=1e-4)


class FewConvs(nn.Module):
    def forward(self, x):
        return F.interpolate(torch.relu(self.c(x)), scale_factor=2.0)

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, padding=1)


class TwoParts(nn.Module):
    """Three convs, an upsampling (not blocked), then one conv: only the first part is large enough."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(8, 8, 3, padding=1) for _ in range(4))

    def forward(self, x):
        for conv in self.convs[:3]:
            x = torch.relu(conv(x))
        return F.interpolate(self.convs[3](F.interpolate(x, scale_factor=2.0)), scale_factor=0.5)


class ViewBeforeWrite(nn.Module):
    """A view of a conv's result is taken, then the result is written in place (relu_): eager's view sees the
    write. A dense copy made for the view would not."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(8, 8, 3, padding=1) for _ in range(4))

    def forward(self, x):
        for conv in self.convs[:-1]:
            x = torch.relu(conv(x))
        c = self.convs[-1](x)
        corner = c[:, :, :2, :2]
        c.relu_()
        return F.interpolate(c, scale_factor=2.0), corner


class OutsideWrite(nn.Module):
    """Part of the input is written in place, through a view, between two convs reading it: the second conv must
    see the write. The pass stays off (default-deny: any write outside a region)."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(8, 8, 3, padding=1) for _ in range(4))

    def forward(self, x):
        a = self.convs[0](x)
        x[:, :4].mul_(2)
        b = self.convs[1](x)
        y = self.convs[3](torch.relu(self.convs[2](a + b)))
        return F.interpolate(y, scale_factor=2.0)


class WithAuxiliary(nn.Module):
    """A segmenter and a one-conv auxiliary head on its upsampled output, written in place (``relu_``): a write
    outside the region to new memory no region value or entry shares. The pass stays on."""

    def __init__(self):
        super().__init__()
        self.seg, self.aux = Segmenter(), nn.Conv2d(4, 2, 3, padding=1)

    def forward(self, x):
        y = self.seg(x)
        return y, torch.relu_(self.aux(y))


def test_a_write_to_memory_the_region_does_not_share_keeps_the_pass_on():
    torch.manual_seed(0)
    model = WithAuxiliary().eval()
    traced = ofi(model, (torch.randn(2, 3, 32, 32),))
    assert len(blocked_ops(traced)) == 9   # the segmenter's; the lone auxiliary conv stays torch's
    x = torch.randn(3, 3, 24, 40)
    with torch.no_grad():
        for got, want in zip(traced(x), model(x)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_the_pass_stays_off_where_a_conversion_could_lose_a_write_or_cost_more_than_it_saves():
    torch.manual_seed(0)
    assert MIN_CONVS > 1
    assert blocked_ops(ofi(FewConvs().eval(), (torch.randn(1, 3, 16, 16),))) == []
    two = TwoParts().eval()
    traced = ofi(two, (torch.randn(2, 8, 16, 16),))
    assert len(blocked_ops(traced)) == MIN_CONVS == 3   # the lone conv after the upsampling stays torch's
    with torch.no_grad():
        x = torch.randn(3, 8, 12, 20)
        torch.testing.assert_close(traced(x), two(x), rtol=1e-5, atol=1e-5)
    for model in (ViewBeforeWrite().eval(), OutsideWrite().eval()):
        traced = ofi(model, (torch.randn(2, 8, 16, 16),))
        assert blocked_ops(traced) == []
        x = torch.randn(3, 8, 12, 12)
        with torch.no_grad():
            torch.testing.assert_close(traced(x.clone()), model(x.clone()), rtol=1e-5, atol=1e-5)


def test_a_layout_free_net_keeps_its_channels_last_kernels():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()
    traced = ofi(model, (torch.randn(2, 3, 32, 32),))
    assert blocked_ops(traced) == []
    assert any(n.attrs["ops"].startswith("onednn:conv2d") for n in run_graph(traced).nodes if n.op == "tracejit::kernel")


def test_a_moved_program_runs_its_new_dtype():
    torch.manual_seed(0)
    model = Segmenter().eval()
    traced = ofi(model, (torch.randn(2, 3, 32, 32),))
    kernels = [k for k in lowered(traced).kernels if isinstance(k, BlockedConv)]
    assert kernels and kernels[0].moved(lambda t: t.double())._packed is None   # oneDNN's blocked conv: float32 only
    x = torch.randn(2, 3, 24, 24, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(traced.double()(x), model.double()(x))


def test_a_saved_program_keeps_the_plain_graph_and_its_loaded_copy_gives_eagers_answers():
    import io
    torch.manual_seed(0)
    model = Segmenter().eval()
    traced = ofi(model, (torch.randn(2, 3, 32, 32),))
    assert not any(n.op == "tracejit::kernel" for n in traced.forward.graph.nodes)   # the saved graph: no kernel
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    x = torch.randn(3, 3, 40, 24)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(loaded(x), traced(x), rtol=1e-5, atol=1e-5)


class TwoInputs(nn.Module):
    """Three convs on an image, plus a skip tensor added to their result: two region entries."""

    def __init__(self):
        super().__init__()
        self.convs = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                                   nn.Conv2d(8, 8, 3, padding=1))

    def forward(self, x, skip):
        return F.interpolate(torch.relu(self.convs(x) + skip), scale_factor=2.0)


def test_one_entry_tracked_by_autograd_and_one_not_gives_eagers_gradient():
    torch.manual_seed(0)
    model = TwoInputs().eval()
    traced = ofi(model, (torch.randn(2, 8, 16, 16), torch.randn(2, 8, 16, 16)))
    assert len(blocked_ops(traced)) == 3
    x, skip = torch.randn(3, 8, 12, 12), torch.randn(3, 8, 12, 12, requires_grad=True)
    got = traced(x, skip)
    assert got.requires_grad
    got.square().sum().backward()
    grad, skip.grad = skip.grad, None
    want = model(x, skip)
    want.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grad, skip.grad, rtol=1e-4, atol=1e-4)
