"""passes/cuda_sibling_linears.py and kernels/cuda_sibling_linears.py, proved on any machine: the rewrite runs on a
program traced on the meta device (standing for CUDA); the kernel's two paths give F.linear's answers on the CPU;
and a whole program with the kernel in it (the pass let onto the CPU) gives eager's answers on new shapes, with
the kernel's results laid out as the linears' own. On a GPU, tests/device/test_cuda_paths.py runs the kernel."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracejit
from tracejit.kernels.cuda_sibling_linears import CudaSiblingLinears
from tracejit.passes import cuda_sibling_linears, pipeline
from tracejit.passes.cuda_sibling_linears import fuse_cuda_sibling_linears, sibling_linear_nodes
from tracejit.passes.lowered import Lowered

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class Attention(nn.Module):
    """q, k, v of one input (one group); ``o`` reads another value; ``a`` and ``b`` read one input but differ in
    shape; ``c`` writes its input in place between two siblings (``x2``: no group)."""

    def __init__(self, bias=True):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(8, 8, bias=bias) for _ in range(4))
        self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 6)
        self.c, self.d = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k, v = (m(x).view(b, s, 2, 4).transpose(1, 2) for m in (self.q, self.k, self.v))
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, s, 8)
        y = self.o(att)
        x2 = x * 2
        first = self.c(x2)
        x2.add_(1)
        second = self.d(x2)
        return y + first + second, self.a(x).sum(-1) + self.b(x).sum(-1)


def _inputs(b, s, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.randn(b, 1, s, s, generator=g) > -1.0
    return torch.randn(b, s, 8, generator=g), mask


def _graph(device, bias=True, dtype=torch.float32, net=None):
    torch.manual_seed(0)
    net = (net or Attention(bias)).eval().to(device, dtype)
    x, mask = _inputs(2, 5, 0)
    traced = tracejit.trace(net, (x.to(device, dtype), mask.to(device)), check_trace=False)
    return tracejit.optimize_for_inference(traced).forward.run_graph


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_query_key_value_become_one_kernel_and_nothing_else_does(monkeypatch, bias, dtype):
    monkeypatch.setattr(cuda_sibling_linears, "DEVICE_TYPE", "meta")
    lowered = fuse_cuda_sibling_linears(Lowered(_graph("meta", bias, dtype)))
    nodes = sibling_linear_nodes(lowered.graph)
    how = "one batched matmul" if dtype == torch.float32 else "one linear, its results column slices"
    assert [n.attrs["ops"] for n in nodes] == [f"cuda:3 linears (8, 8) as {how}" + (" + bias" * bias)]
    assert nodes[0].attrs["unpack"] == 3 and len(nodes[0].outputs) == 3
    # o (another input), a and b (other shapes), c and d (a write in place between them) stay linears
    assert [n.op for n in lowered.graph.nodes].count("aten::linear.default") == 5


class HeadsFirst(Attention):
    """Its heads viewed as ``(b, s, heads, -1)``."""

    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k, v = (m(x).view(b, s, 2, -1).transpose(1, 2) for m in (self.q, self.k, self.v))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_heads_viewed_as_heads_then_minus_one_are_proven_safe(monkeypatch):
    monkeypatch.setattr(cuda_sibling_linears, "DEVICE_TYPE", "meta")
    graph = _graph("meta", dtype=torch.bfloat16, net=HeadsFirst())
    assert len(sibling_linear_nodes(fuse_cuda_sibling_linears(Lowered(graph)).graph)) == 1


class Leaky(Attention):
    """Its query is also read by an add, whose result would carry the slice's strides on: no column slices."""

    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k, v = (m(x) for m in (self.q, self.k, self.v))
        heads = [t.view(b, s, 2, 4).transpose(1, 2) for t in (q, k, v)]
        return F.scaled_dot_product_attention(*heads, attn_mask=mask), q + 1


class Merged(Attention):
    """Its value is viewed with the last dim merged into another: no column slices."""

    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k = (m(x).view(b, s, 2, 4).transpose(1, 2) for m in (self.q, self.k))
        return F.scaled_dot_product_attention(q, k, k, attn_mask=mask), self.v(x).view(b, s * 8)


@pytest.mark.parametrize("net", [Leaky, Merged])
def test_half_siblings_with_a_reader_not_proven_safe_stay_linears(monkeypatch, net):
    monkeypatch.setattr(cuda_sibling_linears, "DEVICE_TYPE", "meta")
    graph = _graph("meta", dtype=torch.bfloat16, net=net())
    assert sibling_linear_nodes(fuse_cuda_sibling_linears(Lowered(graph)).graph) == []
    float32 = fuse_cuda_sibling_linears(Lowered(_graph("meta", net=net()))).graph
    assert len(sibling_linear_nodes(float32)) == 1   # float32's results are laid out as the linears' own


def test_nothing_changes_off_cuda():
    graph = _graph("cpu")
    assert sibling_linear_nodes(fuse_cuda_sibling_linears(Lowered(graph)).graph) == []


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(8,), (5, 8), (2, 3, 8), (0, 8)])
def test_both_paths_give_the_linears_answers(monkeypatch, shape, bias, batched):
    torch.manual_seed(0)
    weights = [torch.randn(6, 8) for _ in range(3)]
    biases = [torch.randn(6) for _ in range(3)] if bias else None
    kernel = CudaSiblingLinears.of(weights, biases, batched)
    x = torch.randn(shape)
    want = [F.linear(x, w, None if biases is None else biases[i]) for i, w in enumerate(weights)]
    for got in (kernel(x), None):   # a CPU tensor does not fit: the recorded ops; then the batched path
        if got is None:
            monkeypatch.setattr(CudaSiblingLinears, "_fits", lambda self, t: True)
            got = kernel(x)
        assert len(got) == 3
        for g, w in zip(got, want):
            assert g.shape == w.shape and (g.is_contiguous() or not batched)
            torch.testing.assert_close(g, w)


def test_calls_that_do_not_fit_keep_torchs_linears(monkeypatch):
    kernel = CudaSiblingLinears.of([torch.randn(4, 8) for _ in range(2)], None, batched=True)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))   # stand in for a CUDA tensor
    assert kernel._fits(torch.randn(3, 8))
    assert not kernel._fits(torch.randn(3, 8, requires_grad=True))
    assert not kernel._fits(torch.randn(3, 8, dtype=torch.float64))
    assert not kernel._fits(torch.randn(3, 7))


@pytest.mark.parametrize("batched", [True, False])
def test_a_program_with_the_kernel_gives_eagers_answers_on_new_shapes(monkeypatch, batched):
    """The pass let onto the CPU (and the kernel's fast path with it): generated code unpacks the kernel's three
    results, and every later op (view, transpose, attention) takes them, batched blocks or column slices."""
    monkeypatch.setattr(cuda_sibling_linears, "DEVICE_TYPE", "cpu")
    monkeypatch.setattr(cuda_sibling_linears, "BATCHED_DTYPES", (torch.float32,) if batched else ())
    monkeypatch.setattr(pipeline, "IN_MEMORY_PASSES", (("fuse_cuda_sibling_linears", fuse_cuda_sibling_linears),))
    calls = []
    fits = CudaSiblingLinears._fits
    monkeypatch.setattr(CudaSiblingLinears, "_fits",
                        lambda self, t: calls.append(1) or (fits(self, t) or (t.dtype == self.weight.dtype
                                                                             and not t.requires_grad)))
    torch.manual_seed(0)
    net = Attention().eval()
    with torch.no_grad():
        optimized = tracejit.optimize_for_inference(tracejit.trace(net, _inputs(2, 5, 0), check_trace=False))
        (node,) = sibling_linear_nodes(optimized.forward.run_graph)
        assert ("batched" in node.attrs["ops"]) == batched
        for b, s, seed in ((1, 1, 1), (3, 7, 2), (4, 33, 3)):
            x, mask = _inputs(b, s, seed)
            want = net(x, mask)
            assert want[0].std() > 0.1   # the input moves the output
            got = optimized(x, mask)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w)
    assert calls   # the kernel ran
    x, mask = _inputs(2, 3, 4)
    x.requires_grad_(True)   # autograd: torch's linears
    net.requires_grad_(False)   # (else eager's c would need the x2 that add_ overwrote)
    optimized(x, mask)[0].square().sum().backward()
    got, x.grad = x.grad, None
    net(x, mask)[0].square().sum().backward()
    torch.testing.assert_close(got, x.grad)
