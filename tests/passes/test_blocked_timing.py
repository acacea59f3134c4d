"""passes/blocked_timing.py: a conv region runs in oneDNN's blocked layout only where its convs, timed both ways at
their traced sizes on this machine, are faster blocked (issue #25 item 1: on one CPU the blocked regions made dla34 at
batch 1 1.27x its traced program's time). The timings are injected here (``_TIMES``), so each verdict is fixed; the
measurement itself runs in the last tests."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import tracejit
from conv_answers import assert_eager_answers_on_new_images
from tracejit.backends import region_choice
from tracejit.kernels.onednn_conv import available
from tracejit.passes import blocked_convs, blocked_timing

pytestmark = [pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.skipif(not available(), reason="this torch build has no oneDNN convolution op")]


class Net(nn.Module):
    """A strided stem, a residual pair of 3x3 convs, upsampling to the input's size (not layout-free: a region)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.a, self.b = nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1)
        self.head = nn.Conv2d(16, 4, 1)

    def forward(self, x):
        s = torch.relu(self.stem(x))
        y = self.b(torch.relu(self.a(s))) + s
        return F.interpolate(self.head(torch.relu(y)), size=x.shape[-2:], mode="bilinear", align_corners=False)


@pytest.fixture(autouse=True)
def fresh_timings(monkeypatch):
    monkeypatch.setattr(blocked_convs, "MIN_DENSE_MACS", 0)   # small convs count as large enough here
    monkeypatch.setattr(blocked_timing, "MEASURE", True)
    monkeypatch.setattr(blocked_timing, "_TIMES", {})
    # these tests pin the per-region verdicts: the whole program's timing (backends/region_choice.py) keeps them
    monkeypatch.setattr(region_choice, "interleaved", lambda timed, every, deadline, rounds: None)


def _blocked_convs(optimized) -> int:
    return sum(n.op == "tracejit::kernel" and n.attrs["ops"] == "onednn:blocked_conv2d"
               for n in optimized.forward.lowered.graph.nodes)


def _optimized(net, example):
    with torch.no_grad():
        return tracejit.optimize_for_inference(tracejit.trace(net, (example,)))


def _inject(monkeypatch, plain: float, blocked: float, conversion: float = 0.0):
    """Every conv times ``plain`` / ``blocked`` seconds, each conversion ``conversion``, whatever the key."""
    class Times(dict):
        def __contains__(self, key):
            return True

        def __getitem__(self, key):
            return (0.0, conversion) if key[0] == "conversions" else (plain, blocked)
    monkeypatch.setattr(blocked_timing, "_TIMES", Times())


def test_a_region_slower_blocked_on_this_machine_stays_torchs_convs(monkeypatch):
    torch.manual_seed(0)
    net = Net().eval()
    _inject(monkeypatch, plain=1e-3, blocked=1.2e-3)
    optimized = _optimized(net, torch.randn(1, 3, 32, 32))
    assert _blocked_convs(optimized) == 0
    assert_eager_answers_on_new_images(net, optimized)


def test_a_region_faster_blocked_runs_blocked(monkeypatch):
    torch.manual_seed(0)
    net = Net().eval()
    _inject(monkeypatch, plain=1e-3, blocked=0.5e-3, conversion=1e-5)
    optimized = _optimized(net, torch.randn(1, 3, 32, 32))
    assert _blocked_convs(optimized) == 4
    assert_eager_answers_on_new_images(net, optimized)


def test_conversions_count_against_the_region(monkeypatch):
    """Convs 10% faster blocked, but the region's conversions cost more than that saves: torch's convs."""
    torch.manual_seed(0)
    net = Net().eval()
    _inject(monkeypatch, plain=1e-3, blocked=0.9e-3, conversion=1e-3)
    assert _blocked_convs(_optimized(net, torch.randn(1, 3, 32, 32))) == 0


def test_a_region_not_timed_within_the_budget_stays_plain(monkeypatch):
    """Default-deny: a region whose convs could not all be timed keeps torch's ops."""
    monkeypatch.setattr(blocked_timing, "BUDGET_S", -1.0)
    torch.manual_seed(0)
    net = Net().eval()
    optimized = _optimized(net, torch.randn(1, 3, 32, 32))
    assert _blocked_convs(optimized) == 0
    assert_eager_answers_on_new_images(net, optimized)


def _spy_timings(monkeypatch) -> list:
    """Each ``_time_conv`` call's ``(traced input shape, layout arguments)``, the real timing still run."""
    calls = []
    real = blocked_timing._time_conv
    monkeypatch.setattr(blocked_timing, "_time_conv",
                        lambda spec, shape, *layout: calls.append((shape, layout)) or real(spec, shape, *layout))
    return calls


def test_each_conv_is_timed_once_per_process(monkeypatch):
    timed = _spy_timings(monkeypatch)
    torch.manual_seed(0)
    net = Net().eval()
    first = _optimized(net, torch.randn(1, 3, 32, 32))
    assert len(timed) == 3                     # stem, a (b has a's weight shape and input size: a's time), head
    second = _optimized(net, torch.randn(1, 3, 32, 32))
    assert len(timed) == 3                     # the same convs again: nothing measured
    assert _blocked_convs(first) == _blocked_convs(second)
    assert_eager_answers_on_new_images(net, second)


@pytest.mark.parametrize("channels_last", [False, True])
def test_measured_times_are_positive_per_call_seconds(channels_last):
    w = torch.randn(16, 16, 3, 3)
    if channels_last:
        w = w.contiguous(memory_format=torch.channels_last)   # as conv_layout.py leaves it
    plain, blocked = blocked_timing._time_conv((w, None, (1, 1), (1, 1), (1, 1), 1), (1, 16, 24, 24), channels_last)
    assert 0 < plain < 1 and 0 < blocked < 1


def test_a_channels_last_graphs_convs_are_timed_as_conv_kernels_runs_them(monkeypatch):
    """The baseline is conv_kernels.py's prepacked channels-last conv, not torch's conv2d (which reorders a
    channels-last weight on every call)."""
    called = []
    real = blocked_timing.OneDnnConv.__call__
    monkeypatch.setattr(blocked_timing.OneDnnConv, "__call__",
                        lambda self, x, *rest: called.append(x.is_contiguous(memory_format=torch.channels_last))
                        or real(self, x, *rest))
    w = torch.randn(16, 16, 3, 3).contiguous(memory_format=torch.channels_last)
    blocked_timing._time_conv((w, None, (1, 1), (1, 1), (1, 1), 1), (1, 16, 24, 24), True)
    assert called and all(called)
    called.clear()
    blocked_timing._time_conv((w.contiguous(), None, (1, 1), (1, 1), (1, 1), 1), (1, 16, 24, 24), False)
    assert not called   # an NCHW graph's baseline is torch's conv2d


class ChannelsLastNet(Net):
    """Net without the resize: every op ignores strides, so conv_layout.py runs it channels-last."""

    def forward(self, x):
        s = torch.relu(self.stem(x))
        return self.head(torch.relu(self.b(torch.relu(self.a(s))) + s))


def _channels_last_weights(optimized) -> bool:
    """Are the conv weights of the graph before lowering (the one a file saves) channels-last?"""
    graph = optimized.forward.graph
    return any(isinstance(c, torch.Tensor) and c.dim() == 4 and not c.is_contiguous()
               and c.is_contiguous(memory_format=torch.channels_last) for c in graph.constants)


@pytest.mark.parametrize("blocked, regions", [(0.5e-3, 4), (1.2e-3, 0)], ids=["faster-blocked", "slower-blocked"])
def test_a_channels_last_net_runs_blocked_only_where_timed_faster_than_channels_last(monkeypatch, blocked, regions):
    torch.manual_seed(0)
    net = ChannelsLastNet().eval()
    _inject(monkeypatch, plain=1e-3, blocked=blocked, conversion=1e-5)
    optimized = _optimized(net, torch.randn(1, 3, 32, 32))
    assert _channels_last_weights(optimized)   # conv_layout.py made it channels-last
    assert _blocked_convs(optimized) == regions
    assert_eager_answers_on_new_images(net, optimized)
    with torch.no_grad():
        assert optimized(torch.randn(2, 3, 40, 56)).is_contiguous()   # NCHW out, as eager's


def test_a_channels_last_net_is_timed_against_channels_last_convs(monkeypatch):
    calls = _spy_timings(monkeypatch)
    torch.manual_seed(0)
    _optimized(ChannelsLastNet().eval(), torch.randn(1, 3, 32, 32))
    assert calls and all(layout == (True,) for _, layout in calls)
    calls.clear()
    _optimized(Net().eval(), torch.randn(1, 3, 32, 32))   # not layout-free: against torch's NCHW convs
    assert calls and all(layout == (False,) for _, layout in calls)


def test_timing_off_keeps_a_channels_last_net_channels_last(monkeypatch):
    """Default-deny: without the measurement a channels-last net keeps its channels-last convs."""
    monkeypatch.setattr(blocked_timing, "MEASURE", False)
    torch.manual_seed(0)
    net = ChannelsLastNet().eval()
    optimized = _optimized(net, torch.randn(1, 3, 32, 32))
    assert _blocked_convs(optimized) == 0 and _channels_last_weights(optimized)
    assert_eager_answers_on_new_images(net, optimized)
