"""passes/linear_kernels.py + kernels/onednn_linear.py: large constant-weight linears (with the
relu / gelu after them) run as one oneDNN call; eager's and torch.jit's answers on new shapes,
torch's ops whenever a call does not fit, small linears untouched, saved programs unchanged."""
from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import tracejit
from tracejit.passes import linear_timing
from tracejit.passes.linear_kernels import linear_kernel_nodes
from tracejit.passes.linear_weight_layout import same_bits, transposed_weights
from tracejit.kernels.onednn_linear import MIN_MACS, MIN_MACS_ONE_THREAD, OneDnnLinear, available

from region_testlib import assert_eager_and_jit_answers, error_type, jit, lowered, ofi, run_graph

pytestmark = [pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.skipif(not available(), reason="this torch build has no oneDNN linear op")]


@pytest.fixture(autouse=True)
def fused_regardless_of_timing(monkeypatch):
    """These tests pin the linear rewrite; whether it pays on this machine is passes/linear_timing.py's
    question (tests/passes/test_linear_timing.py)."""
    monkeypatch.setattr(linear_timing, "MEASURE", False)


class FeedForward(nn.Module):
    """A transformer's feed-forward block: linear, activation, linear, residual, layer norm."""

    def __init__(self, act: nn.Module, d=128, hidden=512):
        super().__init__()
        torch.manual_seed(0)
        self.up, self.act, self.down = nn.Linear(d, hidden), act, nn.Linear(hidden, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.down(self.act(self.up(x))))


def kernel_ops(traced) -> list[str]:
    return sorted(n.attrs["ops"] for n in linear_kernel_nodes(run_graph(traced)))


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act,fused", [(nn.GELU(), "onednn:linear+gelu"), (nn.GELU("tanh"), "onednn:linear+gelu_tanh"),
                                       (nn.ReLU(), "onednn:linear+relu"), (nn.Tanh(), "onednn:linear+tanh"),
                                       (nn.SiLU(), "onednn:linear+silu"), (nn.ReLU6(), "onednn:linear+hardtanh"),
                                       (nn.LeakyReLU(0.2), "onednn:linear+leaky_relu"),
                                       (nn.Hardswish(), "onednn:linear+hardswish"),
                                       (nn.Softplus(), "onednn:linear")])   # softplus: not fused
def test_feed_forward_fuses_and_gives_eager_and_jit_answers_on_new_shapes(act, fused):
    model = FeedForward(act).eval()
    example = torch.randn(4, 32, 128)   # 4*32*128 inputs x 512 outputs: 8M multiply-adds
    traced, ref = ofi(model, (example,)), jit(model, (example,))
    assert kernel_ops(traced) == sorted(["onednn:linear", fused])
    # the weights are laid out as any linear's (passes/linear_weight_layout.py): oneDNN packs its own copy from
    # either layout, and the calls that do not fit run torch's linear on the faster one
    assert transposed_weights(traced.forward.graph) == sum(same_bits(128, i, o, torch.float32, True)
                                                           for o, i in ((512, 128), (128, 512)))
    outs = []
    with torch.no_grad():
        for shape in [(4, 32, 128), (3, 40, 128), (64, 128), (1, 1, 128), (128,)]:   # the last two: torch's path
            x = torch.randn(shape)
            got = traced(x)
            close(got, model(x))
            close(got, ref(x))
            outs.append(got)
    assert not torch.allclose(outs[0], traced(torch.randn(4, 32, 128)))   # the input moves the output


def test_small_linears_stay_torchs_and_keep_their_transposed_layout():
    model = FeedForward(nn.ReLU(), d=16, hidden=32).eval()
    traced = ofi(model, (torch.randn(2, 4, 16),))
    assert kernel_ops(traced) == [] and transposed_weights(traced.forward.graph) == 2
    with torch.no_grad():
        x = torch.randn(3, 5, 16)
        close(traced(x), model(x))


def test_calls_that_do_not_fit_run_torchs_ops_with_eagers_answers_gradients_and_errors():
    model = FeedForward(nn.GELU()).eval()
    traced = ofi(model, (torch.randn(4, 32, 128),))
    x = torch.randn(4, 32, 128, requires_grad=True)   # autograd: torch's ops, gradients flow
    (g,) = torch.autograd.grad(traced(x).square().sum(), x)
    x2 = x.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(model(x2).square().sum(), x2)
    close(g, want)
    with torch.no_grad():
        xt = torch.randn(128, 16, 2).permute(2, 1, 0)   # non-contiguous
        close(traced(xt), model(xt))
        with pytest.raises(RuntimeError) as ours:   # the wrong feature size: torch's error
            traced(torch.randn(2, 16, 100))
        with pytest.raises(RuntimeError) as eager:
            model(torch.randn(2, 16, 100))
        assert str(ours.value) == str(eager.value)
        traced.double()
        model.double()
        xd = torch.randn(4, 32, 128, dtype=torch.float64)
        torch.testing.assert_close(traced(xd), model(xd), rtol=1e-10, atol=1e-10)   # moved: torch's ops
        traced.float()
        model.float()
        close(traced(x.detach()), model(x.detach()))
        graph = run_graph(traced)
        kernel = lowered(traced).kernel(linear_kernel_nodes(graph)[0])
        assert kernel._packed is not None   # back on float32: oneDNN again
        meta = torch.randn(4, 32, 128, device="meta")
        plain = tracejit.trace(model, (torch.randn(4, 32, 128),))
        assert error_type(lambda: traced(meta)) is error_type(lambda: plain(meta))


class TwoReaders(nn.Module):
    """The linear's output is read twice, and one weight serves two layers (tied)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.a = nn.Linear(128, 256)
        self.b = nn.Linear(128, 256)
        self.b.weight = self.a.weight

    def forward(self, x):
        h = self.a(x)
        return torch.relu(h) + h.mean(), self.b(x)


def test_a_value_read_twice_keeps_its_activation_and_tied_weights_stay_one_tensor():
    model = TwoReaders().eval()
    example = torch.randn(4, 32, 128)
    traced, ref = ofi(model, (example,)), jit(model, (example,))
    assert kernel_ops(traced) == ["onednn:linear", "onednn:linear"]
    graph = run_graph(traced)
    first, second = (lowered(traced).kernel(n) for n in linear_kernel_nodes(graph))
    assert first.weight is second.weight
    with torch.no_grad():
        for x in (torch.randn(4, 32, 128), torch.randn(2, 50, 128)):
            for got, want, jit_out in zip(traced(x), model(x), ref(x)):
                close(got, want)
                close(got, jit_out)


def test_saved_program_keeps_the_plain_graph_and_loads_with_the_same_answers():
    model = FeedForward(nn.GELU()).eval()
    traced = ofi(model, (torch.randn(4, 32, 128),))
    assert not linear_kernel_nodes(traced.forward.graph)
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    with torch.no_grad():
        x = torch.randn(3, 9, 128)
        close(loaded(x), model(x))
        close(loaded(x), traced(x))


def test_transformer_encoder_and_bert_use_the_kernels_on_new_lengths():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(4)
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=512, max_position_embeddings=128)
    bert = transformers.BertModel(cfg).eval()
    cases = [(encoder, lambda b, n: (torch.randn(b, n, 128),)),
             (bert, lambda b, n: (torch.randint(0, 100, (b, n)), torch.ones(b, n, dtype=torch.long)))]
    for model, make in cases:
        with torch.no_grad():
            traced = tracejit.optimize_for_inference(tracejit.trace(model, make(8, 40), strict=False))
            ref = torch.jit.trace(model, make(8, 40), check_trace=False, strict=False)
        assert len(kernel_ops(traced)) >= 8
        with torch.no_grad():
            for b, n in ((2, 32), (3, 17), (1, 64)):
                args = make(b, n)
                got, want, jit_out = traced(*args), model(*args), ref(*args)
                got, want = _first(got), _first(want)
                close(got, want)
                close(got, _first(jit_out))


def _first(out):
    if isinstance(out, torch.Tensor):
        return out
    return out[0] if isinstance(out, (tuple, list)) else out["last_hidden_state"]


@pytest.fixture
def threads():
    """Set torch's thread count for one test (the one-thread threshold is higher), then put it back."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.mark.parametrize("n_threads", [2, 1])
def test_kernel_alone_uses_onednn_only_for_large_products(threads, n_threads):
    threads(n_threads)
    torch.manual_seed(5)
    w, b = torch.randn(256, 64), torch.randn(256)
    linear = OneDnnLinear(w, b, "relu")
    least = MIN_MACS if n_threads > 1 else MIN_MACS_ONE_THREAD
    assert MIN_MACS_ONE_THREAD > MIN_MACS
    big = torch.randn(least // 256 // 64 + 1, 64)
    below = torch.randn(least // 256 // 64 - 1, 64)    # one thread: above MIN_MACS, below the one-thread bound
    small = torch.randn(3, 64)
    for x in (big, below, small):
        close(linear(x), torch.relu(torch.nn.functional.linear(x, w, b)))
    calls = []
    real = torch.ops.mkldnn._linear_pointwise

    class Spy:
        def __call__(self, *a):
            calls.append(a[0].shape)
            return real(*a)

    torch.ops.mkldnn._linear_pointwise = Spy()
    try:
        linear(big)
        linear(below)
        linear(small)
    finally:
        torch.ops.mkldnn._linear_pointwise = real
    assert calls == [big.shape]
    assert OneDnnLinear(w.double(), b.double())._packed is None
    assert OneDnnLinear(w.clone().requires_grad_(), b)._packed is None


class WritesBetween(nn.Module):
    """An in-place write to the linear's input between the linear and its activation."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.inner, self.up = nn.Linear(128, 128), nn.Linear(128, 512)

    def forward(self, x):
        h = self.inner(x)
        y = self.up(h)
        h.mul_(-1.0)   # after up read h
        return torch.relu(y).sum(-1) + h.sum(-1)


def test_a_write_in_place_between_the_linear_and_its_activation_keeps_them_apart():
    model = WritesBetween().eval()
    example = torch.randn(4, 32, 128)
    traced, ref = ofi(model, (example,)), jit(model, (example,))
    assert kernel_ops(traced) == ["onednn:linear"]   # up alone: its relu is not fused across the write
    assert_eager_and_jit_answers(traced, model, ref, [(4, 32, 128), (3, 33, 128)], rtol=1e-4, atol=1e-4)
