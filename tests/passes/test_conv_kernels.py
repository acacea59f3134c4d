"""passes/conv_kernels.py + kernels/onednn_conv.py: constant-weight conv2d chains (conv, residual
add_, relu) run as one oneDNN call with a prepacked weight; eager's and torch.jit's answers on
new shapes, torch's ops whenever a call does not fit, guards kept, saved programs unchanged."""
from __future__ import annotations

import io
import threading

import pytest
import torch
from torch import nn

import tracejit
from tracejit.passes.conv_kernels import conv_kernel_nodes
from tracejit.kernels.onednn_conv import OneDnnConv, available

from region_testlib import assert_eager_and_jit_answers, error_type, jit, lowered, ofi, run_graph

pytestmark = [pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.skipif(not available(), reason="this torch build has no oneDNN convolution op")]


@pytest.fixture(autouse=True)
def fuse_every_size(monkeypatch):
    """These tests check the kernel's mechanics on small, fast models: every dense conv is fused here.
    Which convs pay at which size is tested in test_conv_kernel_costs.py."""
    monkeypatch.setattr("tracejit.passes.conv_kernels.MIN_DENSE_MACS", 0)


class Bottleneck(nn.Module):
    """torchvision's bottleneck: 1x1 / 3x3 (stride, groups, dilation) / 1x1 convs with batch norm,
    a projection shortcut, ``out += identity`` and an in-place relu."""

    def __init__(self, cin=8, mid=4, cout=16, stride=2, groups=2, dilation=1):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.c2 = nn.Conv2d(mid, mid, 3, stride, padding=dilation, dilation=dilation, groups=groups, bias=False)
        self.b2 = nn.BatchNorm2d(mid)
        self.c3, self.b3 = nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.b1(self.c1(x)))
        out = self.relu(self.b2(self.c2(out)))
        out = self.b3(self.c3(out))
        out += self.down(x)
        return self.relu(out)


class Net(nn.Module):
    def __init__(self, **block):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block = Bottleneck(**block)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(nn.functional.adaptive_avg_pool2d(self.block(self.stem(x)), 1).flatten(1))


def net(**block):
    torch.manual_seed(0)
    model = Net(**block).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
                m.weight.uniform_(0.5, 1.5)
    return model


def kernel_ops(traced) -> list[str]:
    return sorted(n.attrs["ops"] for n in conv_kernel_nodes(run_graph(traced)))


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def check(traced, model, ref, shapes, scale=1.0):
    assert_eager_and_jit_answers(traced, model, ref, shapes, rtol=1e-4, atol=1e-5, scale=scale)


@pytest.mark.parametrize("block", [{}, {"stride": 1, "groups": 4, "dilation": 2}, {"groups": 1}])
def test_chains_fuse_and_give_eager_and_jit_answers_on_new_shapes(block):
    model = net(**block)
    example = torch.randn(1, 3, 16, 16)
    traced, ref = ofi(model, (example,)), jit(model, (example,))
    assert kernel_ops(traced) == ["onednn:conv2d", "onednn:conv2d+add+relu", "onednn:conv2d+relu",
                                  "onednn:conv2d+relu", "onednn:conv2d+relu"]
    assert "torch.conv2d" not in traced.code and "add_" not in traced.code
    outs = []
    with torch.no_grad():
        for shape in [(1, 3, 16, 16), (3, 3, 16, 16), (2, 3, 23, 17), (1, 3, 9, 30)]:
            x = torch.randn(shape)
            got = traced(x)
            close(got, model(x))
            close(got, ref(x))
            outs.append(got)
    assert not torch.allclose(outs[0], traced(torch.randn(1, 3, 16, 16)))   # the input moves the output


def test_calls_that_do_not_fit_run_torchs_ops_with_eagers_answers_and_gradients():
    model = net()
    traced = ofi(model, (torch.randn(1, 3, 16, 16),))
    with torch.no_grad():
        x = torch.randn(2, 3, 16, 16).permute(0, 1, 3, 2)   # non-contiguous input
        close(traced(x), model(x))
        e = torch.randn(0, 3, 16, 16)                       # empty batch
        assert traced(e).shape == model(e).shape == (0, 5)
    x = torch.randn(2, 3, 12, 12, requires_grad=True)       # autograd: torch's ops, gradients flow
    got = traced(x)
    assert got.requires_grad
    (g,) = torch.autograd.grad(got.square().sum(), x)
    x2 = x.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(model(x2).square().sum(), x2)
    close(g, want)
    with torch.no_grad():
        xd = torch.randn(2, 3, 12, 12, dtype=torch.float64)
        with pytest.raises(RuntimeError) as ours:
            traced(xd)
        with pytest.raises(RuntimeError) as eager:
            model(xd)
        assert type(ours.value) is type(eager.value)


def test_moved_to_float64_and_back_and_meta_inputs():
    model = net()
    traced = ofi(model, (torch.randn(1, 3, 16, 16),))
    graph = run_graph(traced)
    kernel = lowered(traced).kernel(conv_kernel_nodes(graph)[0])
    assert isinstance(kernel, OneDnnConv) and kernel._packed is not None
    with torch.no_grad():
        x = torch.randn(2, 3, 14, 14)
        traced.double()
        close(traced(x.double()), model.double()(x.double()))
        traced.float()
        model.float()
        close(traced(x), model(x))
        ours = error_type(lambda: traced(torch.randn(2, 3, 14, 14, device="meta")))
        plain = tracejit.trace(model, (torch.randn(1, 3, 16, 16),))
        assert ours is error_type(lambda: plain(torch.randn(2, 3, 14, 14, device="meta")))


class ResidualInput(nn.Module):
    """The residual is the caller's tensor: it must not be written, and may broadcast."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv2d(4, 6, 3, padding=1)

    def forward(self, x, r):
        out = self.conv(x)
        out += r
        return torch.relu(out).mean((2, 3))


def test_residual_from_the_caller_is_not_written_and_broadcasts_through_torch():
    model = ResidualInput().eval()
    example = (torch.randn(1, 4, 8, 8), torch.randn(1, 6, 8, 8))
    traced, ref = ofi(model, example), jit(model, example)
    assert kernel_ops(traced) == ["onednn:conv2d+add+relu"]
    with torch.no_grad():
        for r_shape in [(2, 6, 10, 10), (1, 6, 1, 1), (6, 1, 1)]:   # same shape: fused; else torch broadcasts
            x, r = torch.randn(2, 4, 10, 10), torch.randn(r_shape)
            kept = r.clone()
            got = traced(x, r)
            close(got, model(x, r))
            close(got, ref(x, r))
            assert torch.equal(r, kept)
        with pytest.raises(RuntimeError):   # a residual the in-place add cannot take: torch's error
            traced(torch.randn(1, 4, 8, 8), torch.randn(2, 6, 8, 8))


def test_rank_guard_still_raises_on_an_unbatched_input(monkeypatch):
    model = net()
    traced = ofi(model, (torch.randn(1, 3, 16, 16),))
    from tracejit.passes import pipeline
    monkeypatch.setattr(pipeline, "IN_MEMORY_PASSES",
                        tuple(p for p in pipeline.IN_MEMORY_PASSES if p[0] != "fuse_conv_kernels"))
    unfused = ofi(model, (torch.randn(1, 3, 16, 16),))
    assert kernel_ops(unfused) == [] and len(kernel_ops(traced)) == 5
    x = torch.randn(3, 16, 16)   # batch norm's rank check (a guard once folded into the conv)
    for program in (traced, unfused):   # the GuardError of the optimized program itself, not a retrace
        program._live.drop_original()
    with torch.no_grad():
        with pytest.raises(tracejit.GuardError) as ours:
            traced(x)
        with pytest.raises(tracejit.GuardError) as before:
            unfused(x)
    assert "`if input.dim() != 4:`" in str(ours.value) and "value now: 3" in str(ours.value)
    assert str(before.value).split("The trace relied")[0] == str(ours.value).split("The trace relied")[0]


def test_a_graph_returning_a_feature_map_is_fused_and_returns_eagers_layout():
    class Map(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.conv(x))   # a 4-d output: made contiguous at the exit

    model = Map().eval()
    traced, ref = ofi(model, (torch.randn(1, 3, 8, 8),)), jit(model, (torch.randn(1, 3, 8, 8),))
    assert kernel_ops(traced) == ["onednn:conv2d+relu"]
    with torch.no_grad():
        for shape in [(2, 3, 9, 9), (1, 3, 8, 12)]:
            x = torch.randn(shape)
            got, want = traced(x), model(x)
            assert got.is_contiguous() and got.stride() == want.stride()
            close(got, want)
            close(got, ref(x))


def test_saved_program_keeps_the_plain_graph_and_loads_with_the_same_answers():
    model = net()
    traced = ofi(model, (torch.randn(1, 3, 16, 16),))
    assert not conv_kernel_nodes(traced.forward.graph)   # what save writes has no in-memory kernels
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    with torch.no_grad():
        x = torch.randn(2, 3, 20, 20)
        close(loaded(x), model(x))
        close(loaded(x), traced(x))


def test_calls_from_several_threads():
    model = net()
    traced = ofi(model, (torch.randn(1, 3, 16, 16),))
    inputs = [torch.randn(n, 3, 16, 16) for n in (1, 2, 3, 1)] * 4
    results: dict[int, torch.Tensor] = {}

    def work(i):
        with torch.no_grad():
            results[i] = traced(inputs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with torch.no_grad():
        for i, x in enumerate(inputs):
            close(results[i], model(x))


def test_kernel_alone_matches_torch_and_falls_back_for_what_does_not_fit():
    torch.manual_seed(3)
    w, b = torch.randn(8, 2, 3, 3), torch.randn(8)   # 2 groups of 2 input channels
    conv = OneDnnConv(w, b, (2, 1), (1, 0), (1, 2), 2, residual=True, activation="relu", example_shape=(1, 4, 9, 9))
    assert conv._packed is not None and conv.describe() == "conv2d+add+relu"
    x = torch.randn(2, 4, 11, 13)
    want_conv = torch.conv2d(x, w, b, (2, 1), (1, 0), (1, 2), 2)
    r = torch.randn(want_conv.shape)
    close(conv(x, r), torch.relu(want_conv + r))
    close(conv(x, r[:1]), torch.relu(want_conv + r[:1]))              # broadcast: torch's ops
    with torch.enable_grad():
        xg = x.clone().requires_grad_()
        assert conv(xg, r).requires_grad                              # autograd: torch's ops
    assert OneDnnConv(w.double(), b.double(), 1, 1, 1, 2, residual=False)._packed is None
    assert OneDnnConv(w.requires_grad_(), b, 1, 1, 1, 2, residual=False)._packed is None


class WritesBetween(nn.Module):
    """An in-place write between a conv and its add_: the conv must read its input before it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(6)
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.c1(x))
        c = self.c2(h)
        h.mul_(2.0)   # after c2 read h
        c.add_(h)
        return torch.relu(c).mean((2, 3))


def test_a_write_in_place_between_the_chain_nodes_stops_the_chain():
    model = WritesBetween().eval()
    example = torch.randn(1, 3, 8, 8)
    traced, ref = ofi(model, (example,)), jit(model, (example,))
    assert kernel_ops(traced) == ["onednn:conv2d", "onednn:conv2d+relu"]   # c2 alone; add_ and relu stay
    check(traced, model, ref, [(1, 3, 8, 8), (2, 3, 11, 7)])


class ActivationNet(nn.Module):
    """MobileNet / EfficientNet / YOLO style conv + activation stacks."""

    def __init__(self, act: nn.Module):
        super().__init__()
        torch.manual_seed(8)
        self.c1, self.b1, self.act = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), act
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)

    def forward(self, x):
        return self.act(self.dw(self.act(self.b1(self.c1(x))))).mean((2, 3))


@pytest.mark.parametrize("act,label", [(nn.ReLU6(inplace=True), "hardtanh"), (nn.SiLU(), "silu"),
                                       (nn.Hardswish(), "hardswish"), (nn.LeakyReLU(0.1), "leaky_relu"),
                                       (nn.Sigmoid(), "sigmoid"), (nn.GELU(), "gelu")])
def test_other_activations_fuse_into_the_conv_with_eager_and_jit_answers(act, label):
    model = ActivationNet(act).eval()
    with torch.no_grad():
        model.b1.running_var.uniform_(0.5, 2)
    example = torch.randn(1, 3, 10, 10) * 4   # values beyond ReLU6's and hardswish's bends
    traced, ref = ofi(model, (example,)), jit(model, (example,))
    assert kernel_ops(traced) == [f"onednn:conv2d+{label}"] * 2
    check(traced, model, ref, [(1, 3, 10, 10), (2, 3, 13, 9)], scale=4.0)


class SamePadding(nn.Module):
    """EfficientNet's convs: padding="same" / "valid" (aten::conv2d.padding), batch norm, SiLU; a 2x2
    "same" conv pads one side more (oneDNN's op takes symmetric padding: torch's conv2d runs it)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(9)
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding="same", bias=False), nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 5, padding="same", dilation=2, groups=8)
        self.c3 = nn.Conv2d(8, 8, 2, padding="same")
        self.c4 = nn.Conv2d(8, 4, 1, padding="valid")

    def forward(self, x):
        h = nn.functional.silu(self.b1(self.c1(x)))
        return self.c4(self.c3(nn.functional.silu(self.c2(h)))).mean((2, 3))


def test_same_and_valid_padding_fold_and_fuse():
    model = SamePadding().eval()
    with torch.no_grad():
        model.b1.running_var.uniform_(0.5, 2)
        model.b1.running_mean.uniform_(-1, 1)
    example = torch.randn(1, 3, 12, 12)
    traced, ref = ofi(model, (example,)), jit(model, (example,))
    assert not any(n.op == "aten::batch_norm.default" for n in traced.forward.graph.nodes)   # folded
    assert kernel_ops(traced) == ["onednn:conv2d", "onednn:conv2d+silu", "onednn:conv2d+silu"]
    assert [n.op for n in run_graph(traced).nodes].count("aten::conv2d.padding") == 1   # the 2x2 "same"
    check(traced, model, ref, [(1, 3, 12, 12), (2, 3, 15, 10)])


class OutOfPlaceResidual(nn.Module):
    """timm / EfficientNet style: ``x + conv(h)`` and ``conv(h) + r`` (aten::add.Tensor, not in place)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(10)
        self.c1, self.c2, self.c3 = (nn.Conv2d(6, 6, 3, padding=1) for _ in range(3))

    def forward(self, x, r):
        h = x + self.c1(x)                   # the conv result second
        h = torch.relu(self.c2(h) + h)       # first, then relu
        return torch.relu(self.c3(h) + r)    # r: the caller's, may broadcast at a call


def test_out_of_place_residual_adds_fuse_and_a_broadcasting_one_runs_torchs_add():
    model = OutOfPlaceResidual().eval()
    example = (torch.randn(1, 6, 8, 8), torch.randn(1, 6, 8, 8))
    traced, ref = ofi(model, example), jit(model, example)
    assert kernel_ops(traced) == ["onednn:conv2d+add", "onednn:conv2d+add+relu", "onednn:conv2d+add+relu"]
    with torch.no_grad():
        for x_shape, r_shape in [((2, 6, 9, 7), (2, 6, 9, 7)), ((2, 6, 9, 7), (1, 6, 1, 1)),
                                 ((1, 6, 4, 4), (6, 1, 1))]:
            x, r = torch.randn(x_shape), torch.randn(r_shape)
            kept = r.clone()
            got, want = traced(x, r), model(x, r)
            assert got.shape == want.shape
            close(got, want)
            close(got, ref(x, r))
            assert torch.equal(r, kept)
    broadcast_when_traced = (torch.randn(1, 6, 8, 8), torch.randn(1, 6, 1, 1))
    traced = ofi(model, broadcast_when_traced)   # r's traced shape is not the conv's: that add stays torch's
    assert kernel_ops(traced) == ["onednn:conv2d", "onednn:conv2d+add", "onednn:conv2d+add+relu"]
    with torch.no_grad():
        x, r = torch.randn(2, 6, 5, 5), torch.randn(1, 6, 1, 1)
        close(traced(x, r), model(x, r))
