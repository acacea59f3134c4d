"""elementwise_costs.BIT_EXACT: the steps the region passes may move out of torch give torch's CPU float32
answer to the bit, on the numpy ufunc path and as numexpr nodes, over ~0.6M values of every range and the
special values (issue #25 item 3: an optimized program as exact as torch.jit's freeze). The steps left out
(transcendentals, sqrt) are shown to differ, and a model using them (GPT-2's tanh-GELU) keeps eager's bits."""
from __future__ import annotations

import math

import pytest
import torch

from region_testlib import jit, ofi, run_graph
from tracejit.kernels import numexpr_groups
from tracejit.kernels.elementwise_costs import BIT_EXACT, SCALAR_POWERS
from tracejit.kernels.numpy_kernel import NUMPY, NumpyKernel
from tracejit.passes.numpy_regions import region_nodes

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _values() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    n = 1 << 16
    parts = [torch.randn(n, generator=g) * s for s in (1e-3, 1.0, 7.0, 100.0, 1e20)]
    parts += [torch.rand(n, generator=g) * 2 - 1, torch.rand(n, generator=g) * 1e4,
              torch.randint(-(1 << 31), (1 << 31) - 1, (n,), generator=g, dtype=torch.int32).view(torch.float32),
              torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-40, -1e-40, 1e-45, 3.4e38, -3.4e38,
                            0.5, -0.5, 1.5, -2.5, 88.7, -104.0])]
    return torch.cat(parts)


VALUES = _values()
UNARY_EXACT = sorted(op for op in BIT_EXACT if op in NUMPY and "{b}" not in NUMPY[op])
SCALAR_OPS = [("add", 0.1), ("sub", 0.3), ("mul", 1.7), ("div", 3.0), ("rsub", 1.0), ("clamp_min", -0.25),
              ("clamp_max", 0.5)] + [("pow", p) for p in SCALAR_POWERS]


def same_bits(got: torch.Tensor, want: torch.Tensor) -> int:
    """How many elements differ in their bits (any NaN equals any NaN)."""
    nan = torch.isnan(got) & torch.isnan(want)
    return int(((got.view(torch.int32) != want.view(torch.int32)) & ~nan).sum())


def numpy_path(op: str, x: torch.Tensor, scalars=()) -> torch.Tensor:
    """``op`` as a numpy kernel's ufunc statement, in chunks the fast path takes."""
    kernel = NumpyKernel([(op, [("in", 0)] + [("s", s) for s in scalars], False)], 1, [], [0])
    with torch.no_grad():
        return torch.cat([kernel(c.contiguous()) for c in x.split(4096)])


def numexpr_path(op: str, x: torch.Tensor, scalars=()) -> torch.Tensor:
    """``op`` as one node of a numexpr program (the builders numexpr_groups.plan uses)."""
    assert numexpr_groups.available()
    ne = numexpr_groups._ne
    leaf = ne.VariableNode("x0", "float")
    operands = [leaf] + [ne.ConstantNode(torch.tensor(s, dtype=torch.float32).numpy()[()]) for s in scalars]
    if op == "pow":
        node = numexpr_groups._scalar_power(leaf, float(scalars[0]))
    else:
        node = numexpr_groups.EXPR[op][0](*operands)
    program = numexpr_groups.numexpr.NumExpr(node, [("x0", float)], optimization="none")
    return torch.from_numpy(program(x.numpy()))


def torch_op(op: str, x: torch.Tensor, scalars=()) -> torch.Tensor:
    if op == "rsub":
        return torch.rsub(x, scalars[0])
    if op == "pow":
        return torch.pow(x, scalars[0])
    return getattr(torch, op)(x, *scalars)


@pytest.mark.parametrize("op", UNARY_EXACT)
def test_each_listed_unary_step_gives_torchs_bits_on_both_paths(op):
    want = torch_op(op, VALUES)
    assert same_bits(numpy_path(op, VALUES), want) == 0
    if op in numexpr_groups.EXPR:
        assert same_bits(numexpr_path(op, VALUES), want) == 0


@pytest.mark.parametrize("op,scalar", SCALAR_OPS, ids=[f"{o}{s}" for o, s in SCALAR_OPS])
def test_each_listed_scalar_step_gives_torchs_bits_on_both_paths(op, scalar):
    want = torch_op(op, VALUES, (scalar,))
    assert same_bits(numpy_path(op, VALUES, (scalar,)), want) == 0
    assert same_bits(numexpr_path(op, VALUES, (scalar,)), want) == 0


def test_the_listed_unary_steps_cover_the_exact_ones_and_the_others_differ():
    """The list is not too short by accident: every unary step the kernel knows is either listed or
    measured off torch's answer here (so leaving it in torch keeps the optimized program exact)."""
    assert {"abs", "neg", "relu", "floor", "rsqrt", "square"} <= set(UNARY_EXACT)
    for op in sorted(op for op in NUMPY if "{b}" not in NUMPY[op] and op not in BIT_EXACT
                     and op not in ("linear_nobias",)):
        x = VALUES[VALUES.abs() < 80][::12]   # ~30K values of every range; NaN where both are off the domain
        assert same_bits(numpy_path(op, x), torch_op(op, x)) > 0, op


def gelu_tanh(x):
    """GPT-2's gelu_new (transformers.activations.NewGELUActivation)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def test_gpt2s_gelu_keeps_eagers_and_jits_bits_on_new_shapes():
    example = (torch.randn(1, 16, 64),)
    traced, ref = ofi(gelu_tanh, example), jit(gelu_tanh, example)
    regions = region_nodes(run_graph(traced))
    assert regions and all("tanh" not in n.attrs["ops"] for n in regions)   # the arithmetic around it is fused
    for shape in [(1, 16, 64), (2, 9, 64), (5, 64)]:
        x = torch.randn(shape) * 3
        want = gelu_tanh(x)
        assert not torch.equal(want, gelu_tanh(torch.randn(shape)))
        torch.testing.assert_close(traced(x), want, rtol=0, atol=0)
        torch.testing.assert_close(traced(x), ref(x), rtol=0, atol=0)
