"""passes/numpy_regions.py and kernels/numpy_kernel.py: small float32 elementwise / linear runs
fused into one numpy kernel by optimize_for_inference; the same bits as eager and torch.jit.trace on
new shapes for the elementwise steps (products: BLAS's reassociation), the fallback (other dtype,
autograd, large, moved constants), save / load."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.passes import numpy_regions
from region_testlib import jit, lowered, ofi, run_graph
from tracejit.ir import verify
from tracejit.passes.lowered import Lowered
from tracejit.passes.numpy_regions import OP, fuse_numpy_regions, region_nodes
from tracejit.passes.pipeline import run_passes

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def mixed_chain(x, y):
    """Every kind of step the pass takes: unary, scalar (both sides), tensor-tensor, clamp forms, pow by
    the scalars torch computes without pow."""
    a = 2 * x
    b = 1 - a
    c = b / 3
    d = 2 / (c.abs() + 1)
    e = (c ** 2) + d.clamp(-3, 3) ** 3
    h = x - y
    i = torch.clamp(h, -1, 1)
    j = torch.clamp(i, min=0.1)
    k = torch.rsqrt(j.abs() + 1)
    m = torch.reciprocal(torch.relu(k) * 3 - 1)
    n = -m + torch.square(e) * (-d) + torch.neg(y).clamp(max=0.5)
    return (n * torch.abs(x) + (e.abs() + 1) ** -0.5 - torch.floor(y * 4) / 4
            + torch.ceil(x * 2) * d ** -2 - torch.trunc(y * 3) * (c ** -1))


def two_outputs(x):
    s = torch.abs(x * 1.5)
    return s, torch.neg(s) * 2 + 1


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 8)).eval()


def region_ops(traced):
    return [n.attrs["ops"][len("numpy:"):] for n in region_nodes(run_graph(traced))]


def test_elementwise_chain_is_one_region_and_matches_eager_and_jit_on_new_lengths():
    torch.manual_seed(1)
    example = (torch.randn(8), torch.randn(8))
    traced = ofi(mixed_chain, example)
    ref = jit(mixed_chain, example)
    (ops,) = region_ops(traced)
    assert ops.count(",") + 1 >= 40 and "rsqrt" in ops and "rsub" in ops and "trunc" in ops
    assert "clamp_min" in ops and "clamp_max" in ops and "clamp" in ops.split(",")
    outs = []
    for n in (8, 3, 50, 1000):
        x, y = torch.randn(n) * 2, torch.randn(n)
        out = traced(x, y)
        torch.testing.assert_close(out, mixed_chain(x, y), rtol=0, atol=0, equal_nan=True)   # the same bits
        torch.testing.assert_close(out, ref(x, y), rtol=0, atol=0, equal_nan=True)
        outs.append(out)
    assert not torch.allclose(outs[0], traced(torch.randn(8), torch.randn(8)))   # the inputs move the output


def test_mlp_linear_layers_run_in_the_region_on_new_batch_sizes_and_ranks():
    model = mlp()
    traced = ofi(model, (torch.randn(1, 16),))
    # tanh stays torch's (numpy's float32 tanh is 1 ulp from torch's on many values: elementwise_costs.BIT_EXACT);
    # the last linear alone does not pay for a kernel's entry
    assert region_ops(traced) == ["linear,relu,linear"]
    ref = jit(model, (torch.randn(1, 16),))
    with torch.no_grad():
        for x in (torch.randn(1, 16), torch.randn(5, 16), torch.randn(2, 3, 16), torch.randn(16)):
            torch.testing.assert_close(traced(x), model(x), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(traced(x), ref(x), rtol=1e-4, atol=1e-5)


def test_chained_linears_fold_their_biases_into_the_products_and_stay_current():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    traced = ofi(model, (torch.randn(1, 16),))
    fn = traced.forward.lowered.kernel(region_nodes(traced.forward.run_graph)[0])
    assert fn.source.count(".dot(_B") == 3 and fn.source.count("_np_add(") == 1   # one bias add for three layers
    # frozen copies only this program holds: no per-call version checks (a frozen program is a snapshot)
    assert "_version" not in fn.source and fn.kernel.private == set(range(6))
    with torch.no_grad():
        for x in (torch.randn(1, 16), torch.randn(6, 16), torch.randn(16)):
            torch.testing.assert_close(traced(x), model(x), rtol=1e-5, atol=1e-6)
        x = torch.randn(3, 16)
        before = traced(x)
        model[2].bias.add_(0.5)   # the module changes; the frozen program does not (docs/COMPAT.md freeze-snapshot)
        torch.testing.assert_close(traced(x), before)

    # captured tensors (not frozen copies) are the caller's: a change in place must reach the folded copies
    w1, b1, w2, b2 = torch.randn(32, 16), torch.randn(32), torch.randn(8, 32), torch.randn(8)

    def chain(x):
        return nn.functional.linear(torch.relu(nn.functional.linear(x, w1, b1)), w2, b2)

    traced_fn = ofi(chain, (torch.randn(2, 16),))
    graph = run_graph(traced_fn)
    kernel = lowered(traced_fn).kernel(region_nodes(graph)[0])
    assert "_version" in kernel.source and not kernel.kernel.private
    with torch.no_grad():
        x = torch.randn(3, 16)
        torch.testing.assert_close(traced_fn(x), chain(x), rtol=1e-5, atol=1e-6)
        b1.add_(0.5)   # the first layer's bias, folded into the next product
        w2.mul_(2.0)
        torch.testing.assert_close(traced_fn(x), chain(x), rtol=1e-5, atol=1e-6)


class CountingMLP(nn.Module):
    """Writes one of its buffers in place each call: frozen constants are no longer constant."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)
        self.register_buffer("shift", torch.zeros(16))

    def forward(self, x):
        out = self.b(torch.relu(self.a(x)) + self.shift)
        self.shift.add_(0.25)
        return out


def test_a_program_that_writes_in_place_keeps_the_version_checks():
    model = CountingMLP().eval()
    traced = ofi(model, (torch.randn(2, 8),))
    kernels = [traced.forward.lowered.kernel(n) for n in region_nodes(traced.forward.run_graph)]
    assert kernels and all(not k.kernel.private for k in kernels)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 8)
            torch.testing.assert_close(traced(x), model(x), rtol=1e-5, atol=1e-6)


def test_two_outputs_unpack_and_no_output_aliases_the_input():
    x = torch.randn(6)
    traced = ofi(two_outputs, (x,))
    assert len(region_nodes(traced._fn.run_graph)[0].outputs) == 2
    z = torch.randn(11)
    keep = z.clone()
    s, c = traced(z)
    torch.testing.assert_close(s, torch.abs(z * 1.5), rtol=0, atol=0)
    torch.testing.assert_close(c, torch.neg(torch.abs(z * 1.5)) * 2 + 1, rtol=0, atol=0)
    assert torch.equal(z, keep) and s.data_ptr() != z.data_ptr() and c.data_ptr() != s.data_ptr()


def test_non_contiguous_and_inference_mode_inputs():
    traced = ofi(two_outputs, (torch.randn(4, 3),))
    x = torch.randn(3, 4).t()
    torch.testing.assert_close(traced(x)[1], two_outputs(x)[1])
    with torch.inference_mode():
        y = torch.randn(4, 3)
        torch.testing.assert_close(traced(y)[1], two_outputs(y)[1])


def test_fallback_for_other_dtypes_large_inputs_and_autograd():
    model = mlp()
    traced = ofi(mixed_chain, (torch.randn(8), torch.randn(8)))
    x, y = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    out = traced(x, y)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, mixed_chain(x, y))
    big = torch.randn(10000), torch.randn(10000)
    torch.testing.assert_close(traced(*big), mixed_chain(*big), rtol=1e-5, atol=1e-5)
    # a tracked input: the torch path, so the gradient is eager's
    xg, yg = torch.randn(8, requires_grad=True), torch.randn(8)
    traced(xg, yg).sum().backward()
    xe = xg.detach().clone().requires_grad_()
    mixed_chain(xe, yg).sum().backward()
    torch.testing.assert_close(xg.grad, xe.grad)
    # frozen constants are detached: with grad on, the output is untracked as in tracejit.freeze and
    # torch.jit.freeze
    fast = ofi(model, (torch.randn(2, 16),))
    x = torch.randn(2, 16)
    out = fast(x)
    frozen = tracejit.freeze(tracejit.trace(model, (x,)))
    assert out.requires_grad is False and frozen(x).requires_grad is False
    torch.testing.assert_close(out, frozen(x), rtol=1e-4, atol=1e-5)


def test_moved_program_runs_its_moved_constants():
    model = mlp()
    traced = ofi(model, (torch.randn(2, 16),))
    traced.double()
    x = torch.randn(3, 16, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), model.double()(x))


def test_overflow_gives_inf_without_numpy_warnings():
    def f(x):
        return torch.square(x * 1e30) - 1.0, torch.rsqrt(x - 2) + 1.0

    traced = ofi(f, (torch.randn(4),))
    assert region_ops(traced)
    x = torch.tensor([1.0, 2.0, 3.0, -1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = traced(x)
    torch.testing.assert_close(out, f(x), equal_nan=True)
    assert torch.isinf(out[0]).any() and torch.isnan(out[1]).any()


def test_saved_program_holds_the_graph_before_the_pass_and_loads():
    model = mlp()
    traced = ofi(model, (torch.randn(1, 16),))
    assert not any(n.op == OP for n in traced.graph.nodes)
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), traced(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(tracejit.optimize_for_inference(loaded)(x), model(x), rtol=1e-4, atol=1e-5)


def test_a_size_numpy_cannot_combine_gives_torchs_error():
    model = mlp()
    traced = ofi(model, (torch.randn(1, 16),))
    with pytest.raises(RuntimeError) as fast_err, torch.no_grad():
        traced(torch.randn(2, 12))
    with pytest.raises(RuntimeError) as eager_err, torch.no_grad():
        model(torch.randn(2, 12))
    assert str(fast_err.value) == str(eager_err.value)


def test_pass_alone_is_verified_leaves_its_input_alone_and_skips_short_or_unsupported_runs():
    traced = tracejit.trace(mixed_chain, (torch.randn(8), torch.randn(8)))
    before = [n.op for n in traced.graph.nodes]
    source = run_passes(traced.graph)
    lowered_program = fuse_numpy_regions(Lowered(source))
    fused = lowered_program.graph
    verify(fused)
    assert [n.op for n in traced.graph.nodes] == before
    assert [n.op for n in fused.nodes] == [OP]
    assert len(lowered_program.kernels) == 1 and callable(lowered_program.kernel(fused.nodes[0]))
    assert not hasattr(fused, "kernels") and not hasattr(source, "kernels")   # kernels live beside the IR
    x, y = torch.randn(8), torch.randn(8)                                        # new inputs, eager's answer
    torch.testing.assert_close(lowered_program.kernel(fused.nodes[0])(x, y), mixed_chain(x, y))

    large = tracejit.trace(mixed_chain, (torch.randn(5000), torch.randn(5000)))
    assert not region_nodes(fuse_numpy_regions(Lowered(large.graph)).graph)   # traced large: torch's kernels are kept

    def short(x):
        return torch.abs(x) + 1

    assert not region_nodes(fuse_numpy_regions(Lowered(tracejit.trace(short, (torch.randn(3),)).graph)).graph)

    def ints(x):
        return (x * 2 + 1) * 3 - 1

    assert not region_nodes(fuse_numpy_regions(Lowered(tracejit.trace(ints, (torch.arange(4),)).graph)).graph)

    def with_gelu(x):
        return torch.nn.functional.gelu(torch.abs(x) * 2 + 1) * 3 - 1

    ops = [n.op.split(".")[0] for n in fuse_numpy_regions(Lowered(tracejit.trace(with_gelu, (torch.randn(3),)).graph)).graph.nodes]
    assert ops == [OP, "aten::gelu", "aten::mul", "aten::sub"]   # gelu is not numpy's; two ops do not pay


class Affine(nn.Module):
    def forward(self, x):
        return x * 0.5 - 1


def test_a_lone_linear_adds_its_bias_through_a_rank_matched_view_that_stays_current():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), Affine()).eval()
    traced = ofi(model, (torch.randn(1, 16),))
    fn = traced.forward.lowered.kernel(region_nodes(traced.forward.run_graph)[0])
    (bias_index,) = [i for i, k in enumerate(fn.kernel.constants) if k.dim() == 1]
    assert f"_C{bias_index}R if" in fn.source
    with torch.no_grad():
        for x in (torch.randn(1, 16), torch.randn(4, 16), torch.randn(16), torch.randn(2, 3, 16)):
            torch.testing.assert_close(traced(x), model(x), rtol=1e-5, atol=1e-6)
        fn.kernel.constants[bias_index].add_(0.5)   # the (1, n) view sees the change
        model[0].bias.add_(0.5)
        for x in (torch.randn(1, 16), torch.randn(16)):
            torch.testing.assert_close(traced(x), model(x), rtol=1e-5, atol=1e-6)


def test_a_moved_program_swaps_in_a_kernel_over_its_moved_constants_and_back():
    model = mlp()
    traced = ofi(model, (torch.randn(1, 16),))

    def kernel():
        graph = traced.forward.run_graph
        return traced.forward.lowered.kernel(region_nodes(graph)[0])   # the node keeps the first build
    before = kernel()
    traced.double()
    x = torch.randn(3, 16, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), model.double()(x))
        traced.float()
        model.float()
        y = torch.randn(3, 16)
        torch.testing.assert_close(traced(y), model(y), rtol=1e-5, atol=1e-6)
        globs = traced.forward.__func__.__globals__ if hasattr(traced.forward, "__func__") else traced.forward.__globals__
        current = [v for k, v in globs.items() if k.startswith("_tj_k") and hasattr(v, "kernel")]
        assert len(current) == 1 and current[0] is not before and ".numpy()" in current[0].source
        assert current[0].kernel.constants[0].dtype == torch.float32
        traced.to("meta")
        out = traced(torch.randn(2, 16, device="meta"))
        assert out.device.type == "meta" and out.shape == (2, 8)


def test_a_moved_optimized_program_saves_its_moved_constants():
    """The kernel holds its constants; moving the program must still move what save writes."""
    model = mlp()
    traced = ofi(model, (torch.randn(1, 16),))
    traced.double()
    model.double()
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    loaded = tracejit.load(io.BytesIO(buf.getvalue()))
    x = torch.randn(4, 16, dtype=torch.float64)
    with torch.no_grad():
        want = model(x)
        torch.testing.assert_close(traced(x), want)
        torch.testing.assert_close(loaded(x), want)
    saved = [c for c in loaded.forward.graph.constants if isinstance(c, torch.Tensor)]
    assert saved and all(c.dtype == torch.float64 for c in saved)


@pytest.mark.parametrize("make", [
    lambda: torch.randn(4, 3, dtype=torch.float64), lambda: torch.randn(4, 3, dtype=torch.bfloat16),
    lambda: torch.randn(4, 3, dtype=torch.float16), lambda: torch.randn(4, 3, device="meta"),
    lambda: torch.randn(3, 4).t(), lambda: torch.randn(4, 3, requires_grad=True),
    lambda: torch.randn(80, 80), lambda: torch._neg_view(torch.randn(4, 3)),
], ids=["float64", "bfloat16", "float16", "meta", "transposed", "requires_grad", "large", "neg_view"])
def test_inputs_off_the_fast_path_get_eagers_answer(make):
    traced = ofi(two_outputs, (torch.randn(4, 3),))
    x = make()
    got, want = traced(x), two_outputs(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.device == w.device and g.shape == w.shape
        if x.device.type != "meta":
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_on_three_and_four_dim_inputs_runs_in_the_kernel_and_matches_eager(bias, monkeypatch):
    """A transformer's linears see [batch, length, hidden]: the kernel's product takes matmul for ranks
    other than 2 (ndarray.dot is BLAS for 2-D only); same numbers as eager and torch.jit on new shapes.
    (The kernel's numbers are the subject: it is fused though it holds 2 of the toy's 5 compute ops.)"""
    monkeypatch.setattr(numpy_regions, "MIN_SHARE", 0.0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32, bias=bias), nn.GELU(approximate="tanh"), nn.ReLU(),
                          nn.Linear(32, 8, bias=bias), nn.Tanh()).eval()
    traced = ofi(model, (torch.randn(1, 5, 16),))
    assert any(n.op == OP for n in run_graph(traced).nodes)
    reference = jit(model, (torch.randn(1, 5, 16),))
    with torch.no_grad():
        for shape in [(1, 5, 16), (3, 7, 16), (2, 2, 4, 16), (9, 16)]:
            x = torch.randn(shape)
            want = model(x)
            assert not torch.equal(want, model(torch.randn(shape)))   # the input moves the output
            torch.testing.assert_close(traced(x), want, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(reference(x), want, rtol=1e-5, atol=1e-6)


def _kernel_ops(traced) -> list:
    return [n.attrs["ops"] for n in run_graph(traced).nodes if n.op == OP]


def test_kernels_are_fused_only_where_they_hold_half_of_the_programs_compute_ops():
    """A numpy kernel among torch ops costs ~3x its cost alone (bench/pass_time_bisect.py: Whisper's encoder, Mistral,
    GPT-2 and T5 ran 3-16% slower with their kernels): a program keeps its kernels only where they hold at least
    half of its compute ops. An MLP (one kernel for the whole forward) keeps it; the same layers between
    transcendental torch ops (a kernel of 2 ops in 5) run as torch ops; both give eager's numbers on new shapes."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    mixed = nn.Sequential(nn.Linear(16, 32), nn.GELU(approximate="tanh"), nn.ReLU(), nn.Linear(32, 8),
                          nn.Tanh()).eval()
    fused, unfused = ofi(mlp, (torch.randn(1, 16),)), ofi(mixed, (torch.randn(1, 16),))
    assert _kernel_ops(fused) == ["numpy:linear,relu,linear"]
    assert _kernel_ops(unfused) == []
    with torch.no_grad():
        for model, traced in ((mlp, fused), (mixed, unfused)):
            x = torch.randn(3, 16)
            assert not torch.equal(model(x), model(torch.randn(3, 16)))
            torch.testing.assert_close(traced(x), model(x), rtol=1e-5, atol=1e-6)
