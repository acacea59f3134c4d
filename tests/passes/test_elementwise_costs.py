"""kernels/elementwise_costs.py as the region passes use it: a numpy region and its numexpr programs
are chosen for the size the trace saw (GPT-2's tanh-GELU at 4096 elements runs as ufuncs, not as one
numexpr program that cost 117 us against torch's 24), and ``pow`` by a scalar is torch's to the bit."""
from __future__ import annotations

import math

import pytest
import torch

from region_testlib import jit, lowered, ofi, run_graph
from tracejit.passes.numpy_regions import region_nodes
from tracejit.kernels.elementwise_costs import SCALAR_POWERS, numpy_kernel_ns, torch_ns

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def gelu_tanh(x):
    """transformers' NewGELUActivation (GPT-2's MLP activation)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def kernels(traced) -> list:
    graph = run_graph(traced)
    return [lowered(traced).kernel(n) for n in region_nodes(graph)]


def numexpr_programs(traced) -> list:
    return [name for k in kernels(traced) for name in k.__globals__ if name.startswith("_NE") and "LOCK" not in name]


def test_gelu_at_gpt2_size_runs_as_ufuncs_and_as_one_program_when_small():
    large = ofi(gelu_tanh, (torch.randn(1, 16, 256),))   # GPT-2 small config, batch 1: 4096 elements
    small = ofi(gelu_tanh, (torch.randn(1, 4, 8),))
    assert len(kernels(large)) == 1 and not numexpr_programs(large)
    assert len(kernels(small)) == 1 and len(numexpr_programs(small)) == 1
    ref = jit(gelu_tanh, (torch.randn(1, 16, 256),))
    outs = []
    for traced in (large, small):
        for shape in ((1, 16, 256), (1, 4, 8), (2, 7, 64)):
            x = torch.randn(shape) * 3
            out = traced(x)   # tanh stays torch's, the rest is exact: the same bits (elementwise_costs.BIT_EXACT)
            torch.testing.assert_close(out, gelu_tanh(x), rtol=0, atol=0)
            torch.testing.assert_close(out, ref(x), rtol=0, atol=0)
            outs.append(out)
    assert not torch.equal(outs[0], large(torch.randn(1, 16, 256)))   # the inputs move the output


def powers(e):
    return lambda x: torch.pow(x * 1.5 - 0.25, e) * 0.5 + 0.125


@pytest.mark.parametrize("e", SCALAR_POWERS + (2, 3, -1, -2))
@pytest.mark.parametrize("n", [8, 4096])
def test_pow_by_a_scalar_torch_computes_without_pow_is_fused_and_torchs_to_the_bit(e, n):
    fn = powers(e)
    traced = ofi(fn, (torch.randn(n),))
    (kernel,) = kernels(traced)
    assert "pow" in kernel.kernel.describe().split(",")
    assert bool(numexpr_programs(traced)) == (n == 8)   # both the numexpr and the ufunc formulation
    for x in (torch.randn(n) * 2, torch.randn(3, 5) * 2, torch.tensor([0.0, -0.0, 1e-30, -1e30, 3.0, -7.5])):
        x = x.abs() + 0.3 if e == -0.5 else x    # its square root needs x * 1.5 - 0.25 > 0
        assert torch.equal(traced(x), fn(x)), (e, n)


@pytest.mark.parametrize("e", [2.5, 4.0, 0.5, 1.0])
def test_pow_by_another_scalar_stays_a_torch_op_and_gives_eagers_answer(e):
    fn = powers(e)
    traced, ref = ofi(fn, (torch.randn(64).abs(),)), jit(fn, (torch.randn(64).abs(),))
    assert all("pow" not in k.kernel.describe().split(",") for k in kernels(traced))
    for x in (torch.randn(64).abs() + 0.2, torch.randn(4, 9) * 3):
        torch.testing.assert_close(traced(x), fn(x), equal_nan=True, rtol=0, atol=0)
        torch.testing.assert_close(traced(x), ref(x), equal_nan=True, rtol=1e-6, atol=1e-7)


def clamps(x):
    return torch.clamp(torch.clamp(torch.clamp(x * 2.0, -1.0, 1.0) - 0.5, min=-0.75) * 3.0, max=1.25)


def test_a_run_numpy_computes_slower_than_torch_at_its_size_stays_in_torch():
    # clamp costs numpy 0.85 ns per element against torch's 0.09: at 4096 elements the kernel loses
    keys = ["mul", "clamp", "sub", "clamp_min", "mul", "clamp_max"]
    assert numpy_kernel_ns(keys, {"clamp": 2}, 4096) > torch_ns(keys, 4096)
    assert numpy_kernel_ns(keys, {"clamp": 2}, 16) < torch_ns(keys, 16)
    large, small = ofi(clamps, (torch.randn(4096),)), ofi(clamps, (torch.randn(16),))
    assert not kernels(large) and len(kernels(small)) == 1
    for traced in (large, small):
        for x in (torch.randn(4096), torch.randn(16) * 2, torch.randn(3, 11)):
            assert torch.equal(traced(x), clamps(x))


def test_an_op_without_a_measured_cost_is_never_fused(monkeypatch):
    from tracejit.kernels import elementwise_costs
    monkeypatch.delitem(elementwise_costs.PER_ELEMENT_NS, "abs")
    fn = lambda x: torch.abs(x * 2.0 + 1.0) * 3.0 - 1.0   # noqa: E731
    assert kernels(ofi(lambda x: torch.neg(x * 2.0 + 1.0) * 3.0 - 1.0, (torch.randn(16),)))   # neg: measured
    traced = ofi(fn, (torch.randn(16),))
    assert all("abs" not in k.kernel.describe().split(",") for k in kernels(traced))
    x = torch.randn(16)
    assert torch.equal(traced(x), fn(x))


class Mlp(torch.nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.fc = torch.nn.Linear(k, n)

    def forward(self, x):
        return torch.sigmoid(self.fc(x) * 0.5 + 0.25) * 2.0 - 1.0


@pytest.mark.parametrize("rows,k,n,in_region", [(4, 64, 64, True), (16, 256, 64, True), (16, 256, 128, False)])
def test_a_linear_numpys_blas_would_thread_stays_torchs(rows, k, n, in_region):
    # numpy's OpenBLAS takes its own threads above 262144 multiply-adds (16 * 256 * 128 = 524288)
    from tracejit.passes.numpy_regions import BLAS_ONE_THREAD_MACS
    assert (rows * k * n <= BLAS_ONE_THREAD_MACS) == in_region
    torch.manual_seed(0)
    model = Mlp(k, n).eval()
    example = (torch.randn(1, rows, k),)
    traced, ref = ofi(model, example), jit(model, example)
    fused = [op for kernel in kernels(traced) for op in kernel.kernel.describe().split(",")]
    assert ("linear" in fused) == in_region
    for shape in ((1, rows, k), (2, 3, k)):
        x = torch.randn(shape)
        with torch.no_grad():
            torch.testing.assert_close(traced(x), model(x), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(traced(x), ref(x), rtol=1e-5, atol=1e-5)


def rotary(q, cos, rot, sin):
    """A decoder's rotary embedding (transformers' apply_rotary_pos_emb): q * cos + rotate_half(q) * sin."""
    return q * cos + rot * sin


def one_input(q):
    return (q * 0.5 + 0.25) * 2.0


def test_each_tensor_a_kernel_reads_is_costed():
    """Reading a tensor costs a kernel its checks and a .numpy() view (0.6 us): Mistral's rotary embedding
    (4 tensors, 3 steps on 1024 elements) ran in 9.0 us as a kernel against 5.3 us as torch ops; it stays
    torch's now, while the same three steps on one tensor still pay; above MAX_ELEMENTS (8192 here) neither is fused."""
    from tracejit.kernels.elementwise_costs import INPUT_NS
    keys = ["mul", "mul", "add"]
    assert numpy_kernel_ns(keys, {}, 1024, inputs=4) > torch_ns(keys, 1024) > numpy_kernel_ns(keys, {}, 1024, inputs=1)
    assert numpy_kernel_ns(keys, {}, 16, inputs=4) - numpy_kernel_ns(keys, {}, 16, inputs=1) == pytest.approx(3 * INPUT_NS)
    rope_args = (torch.randn(1, 4, 16, 16), torch.randn(1, 1, 16, 16), torch.randn(1, 4, 16, 16), torch.randn(1, 1, 16, 16))
    rope, ref = ofi(rotary, rope_args), jit(rotary, rope_args)
    small, large = ofi(one_input, (torch.randn(1, 16, 64),)), ofi(one_input, (torch.randn(2, 64, 64),))
    assert not kernels(rope) and len(kernels(small)) == 1 and not kernels(large)
    for shape in [(1, 4, 16, 16), (2, 4, 9, 16)]:
        args = (torch.randn(shape), torch.randn(1, 1, *shape[2:]), torch.randn(shape), torch.randn(1, 1, *shape[2:]))
        assert torch.equal(rope(*args), rotary(*args)) and torch.equal(rope(*args), ref(*args))
        assert torch.equal(small(args[0]), one_input(args[0])) and torch.equal(large(args[0]), one_input(args[0]))
