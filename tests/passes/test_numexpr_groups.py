"""kernels/numexpr_groups.py: trees of elementwise steps in a numpy kernel run as one numexpr
program; the same bits as eager and torch.jit.trace on new shapes and special values (only the
steps elementwise_costs.BIT_EXACT lists are fused), float32 throughout, torch's errors and gradients,
and the ufunc path when numexpr is absent."""
from __future__ import annotations


import numexpr
import pytest
import torch

import tracejit
from region_testlib import jit, lowered, ofi, run_graph
from tracejit.passes import numpy_regions
from tracejit.passes.numpy_regions import region_nodes
from tracejit.kernels import numexpr_groups
from tracejit.kernels.elementwise_costs import BIT_EXACT
from tracejit.kernels.numexpr_groups import EXPR, MIN_CALLS, plan

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def kernel_of(traced):
    graph = run_graph(traced)
    (node,) = region_nodes(graph)
    return lowered(traced).kernel(node)


def programs(traced) -> list:
    return [v for name, v in kernel_of(traced).__globals__.items() if name.startswith("_NE") and "LOCK" not in name]


def chain(x):
    """A long chain of the exact steps (70 ops, a relu per round), every value read once: one tree."""
    for _ in range(5):
        x = torch.reciprocal(torch.abs(x * 1.5) + 0.5) * 4.0 - 1.5
        x = torch.relu(torch.neg(torch.floor(x * 1024.0) / 1024.0 + 0.25) * 0.9 + 2.0)
    return x


def exact(got, want):
    """The same bits (NaNs anywhere the other has one)."""
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


SPECIAL = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e30, -1e30, 1e-30])


def test_the_chain_is_one_program_and_matches_eager_and_jit_on_new_shapes_and_special_values():
    example = (torch.randn(16),)
    traced, ref = ofi(chain, example), jit(chain, example)
    assert len(programs(traced)) == 1 and "_np_" not in kernel_of(traced).source.split("def _fallback")[0]
    outs = []
    for x in (torch.randn(16), torch.randn(5) * 3, torch.randn(3, 7), torch.randn(4096), SPECIAL):
        out = traced(x)
        assert out.dtype == torch.float32 and out.shape == x.shape
        exact(out, chain(x))
        exact(out, ref(x))
        outs.append(out)
    assert not torch.allclose(outs[0], traced(torch.randn(16)))   # the inputs move the output


def _unary_case(op):
    f = getattr(torch, op)
    # the operand goes through a few ops first so the tree is worth a program
    return lambda x: f(torch.abs(x * 0.5 + 0.25) * 0.9) * 1.5 - 0.5


def _binary_case(op):
    cases = {
        "add": lambda x, y: torch.abs(x) + torch.neg(y) * 2, "sub": lambda x, y: torch.abs(x) - torch.square(y) * 2,
        "mul": lambda x, y: torch.abs(x) * torch.neg(y) - 2, "div": lambda x, y: torch.abs(x) / (torch.square(y) + 2),
        "pow": lambda x, y: (torch.abs(x) + y) ** 3 * 3 - 1, "rsub": lambda x, y: 1 - torch.abs(x * y) * 2,
        "clamp_min": lambda x, y: torch.clamp(torch.abs(x * y) * 2, min=0.3) - 1,
        "clamp_max": lambda x, y: torch.clamp(torch.abs(x * y) * 2, max=0.3) - 1,
        "clamp": lambda x, y: torch.clamp(torch.neg(x * y) * 2, -0.5, 0.3) - 1,
    }
    return cases[op]


FUSED = sorted(op for op in EXPR if op in BIT_EXACT) + ["pow"]   # pow: by a scalar torch computes without pow


@pytest.mark.parametrize("op", FUSED)
def test_every_op_in_a_program_matches_eager_and_jit(op):
    binary = op in ("add", "sub", "mul", "div", "pow", "rsub", "clamp_min", "clamp_max", "clamp")
    fn = _binary_case(op) if binary else _unary_case(op)
    example = (torch.randn(8), torch.randn(8)) if binary else (torch.randn(8),)
    traced, ref = ofi(fn, example), jit(fn, example)
    assert programs(traced), kernel_of(traced).source
    assert op in kernel_of(traced).kernel.describe().split(",")
    for shape in ((8,), (3, 5), (1,)):
        args = tuple(torch.randn(shape) * 2 for _ in example)
        out = traced(*args)
        assert out.dtype == torch.float32
        exact(out, fn(*args))
        exact(out, ref(*args))
    nan_in = tuple(SPECIAL for _ in example)
    exact(traced(*nan_in), fn(*nan_in))


@pytest.mark.parametrize("op", ["tanh", "exp", "sigmoid", "log1p", "sqrt", "sin"])
def test_an_op_numexpr_computes_differently_from_torch_stays_a_torch_op(op):
    fn = _unary_case(op)
    traced, ref = ofi(fn, (torch.randn(8),)), jit(fn, (torch.randn(8),))
    assert all(op not in n.attrs["ops"] for n in region_nodes(run_graph(traced)))
    x = torch.randn(3, 5) * 2
    exact(traced(x), fn(x))
    exact(traced(x), ref(x))


def escaping(x):
    s = torch.abs(x * 1.5 + 0.1) * 2         # a kernel output and read again inside
    a = torch.reciprocal(torch.neg(s) - 0.5)
    return s, (a * a + a).square() * 3 - 1   # `a` is read three times: materialized, computed once


def test_values_read_outside_or_more_than_once_are_materialized_and_right():
    traced, ref = ofi(escaping, (torch.randn(6),)), jit(escaping, (torch.randn(6),))
    assert len(programs(traced)) >= 2
    for x in (torch.randn(6), torch.randn(2, 9), SPECIAL):
        keep = x.clone()
        got, want, theirs = traced(x), escaping(x), ref(x)
        for g, w, t in zip(got, want, theirs):
            exact(g, w)
            exact(g, t)
        assert torch.equal(x, keep) or x.isnan().any()   # the caller's tensor is untouched
        assert got[0].data_ptr() != got[1].data_ptr() != x.data_ptr()


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 5))

    def forward(self, x, y):
        return torch.square(torch.abs(x * self.scale) + y * 0.5).neg() - 1


def test_broadcasting_with_a_constant_and_between_inputs():
    model = Scaled().eval()
    example = (torch.randn(4, 5), torch.randn(4, 1))
    traced, ref = ofi(model, example), jit(model, example)
    assert programs(traced)
    for x, y in ((torch.randn(4, 5), torch.randn(4, 1)), (torch.randn(2, 3, 5), torch.randn(1, 5)),
                 (torch.randn(5), torch.randn(3, 1))):
        exact(traced(x, y), model(x, y))
        exact(traced(x, y), ref(x, y))


def test_shapes_that_do_not_broadcast_raise_torchs_error_class():
    model = Scaled().eval()
    traced, ref = ofi(model, (torch.randn(4, 5), torch.randn(4, 1))), jit(model, (torch.randn(4, 5), torch.randn(4, 1)))
    bad = (torch.randn(4, 5), torch.randn(3, 1))
    errors = []
    for f in (model, ref, traced):
        with pytest.raises(Exception) as info:
            f(*bad)
        errors.append(type(info.value))
    assert errors[2] is errors[0] is RuntimeError and errors[1] is RuntimeError


def test_gradients_and_other_dtypes_take_torchs_path():
    traced = ofi(chain, (torch.randn(16),))
    x = torch.randn(16, requires_grad=True)
    traced(x).sum().backward()
    x2 = x.detach().clone().requires_grad_()
    chain(x2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    d = torch.randn(16, dtype=torch.float64)
    assert traced(d).dtype == torch.float64
    torch.testing.assert_close(traced(d), chain(d))
    m = torch.randn(16, device="meta")
    assert traced(m).device.type == "meta" and traced(m).shape == (16,)


def deep_relus(x):
    for _ in range(14):
        x = torch.relu(torch.neg(x * 1.1) - 0.1) - 0.2
    return x


def test_a_tree_that_would_grow_too_large_is_cut_into_several_programs():
    traced = ofi(deep_relus, (torch.randn(8),))
    assert len(programs(traced)) >= 2
    ref = jit(deep_relus, (torch.randn(8),))
    for x in (torch.randn(8), torch.randn(30), SPECIAL):
        exact(traced(x), deep_relus(x))
        exact(traced(x), ref(x))


def test_without_numexpr_the_ufunc_path_gives_the_same_numbers(monkeypatch):
    monkeypatch.setattr(numexpr_groups, "available", lambda: False)
    traced = ofi(chain, (torch.randn(16),))
    assert not programs(traced) and "_np_absolute(" in kernel_of(traced).source
    x = torch.randn(9)
    exact(traced(x), chain(x))


def test_importing_tracejit_starts_no_numexpr_threads():
    import subprocess
    import sys
    code = ("import sys, tracejit; print('numexpr' in sys.modules); import torch; "
            "from tracejit.kernels import numexpr_groups; print(numexpr_groups.available())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]


def test_plan_keeps_small_trees_as_ufunc_steps_and_never_computes_a_step_twice():
    # v0 = sin(in0); v1 = v0 + 1 (kernel output); v2 = cos(v1); v3 = exp(v2); v4 = neg(v3); v5 = abs(v4)
    steps = [("sin", [("in", 0)], False), ("add", [("v", 0), ("s", 1.0)], True),
             ("cos", [("v", 1)], False), ("exp", [("v", 2)], True), ("neg", [("v", 3)], True),
             ("abs", [("v", 4)], True)]
    items = plan(steps, outputs=[1, 5], excluded=set(), elements=16)
    assert [item[:2] for item in items] == [("step", 0), ("step", 1), ("expr", 5)]   # sin+add: 2 < MIN_CALLS
    assert MIN_CALLS > 2
    program, leaves = items[2][2:]
    assert leaves == [("v", 1)]
    ops = [line[0] for line in numexpr.disassemble(program)]
    assert len(ops) == 4 and all(op.endswith(b"_ff") or op.endswith(b"_ffn") or op.endswith(b"_ffff")
                                 or op.endswith(b"_fff") for op in ops), ops
    # an excluded step (a folded linear) and a step reading it stay ufunc steps
    assert plan(steps, outputs=[5], excluded={0}, elements=16)[:2] == [("step", 0), ("step", 1)]
    # at 4096 elements numexpr's slower loops (cos 2.3 ns per element against numpy's 0.6) cost more than
    # the three ufunc calls it saves; a size nobody gave is costed at the largest the kernel takes
    assert [item[0] for item in plan(steps, outputs=[1, 5], excluded=set(), elements=4096)] == ["step"] * 6
    assert [item[0] for item in plan(steps, outputs=[1, 5], excluded=set())] == ["step"] * 6


def inverted_clamp(x):
    return torch.clamp(torch.sin(x * 2) * 2, 0.5, -0.5) * 3 - torch.cos(x)   # min > max: torch gives max


def test_clamp_with_min_above_max_gives_max_as_torch_does(monkeypatch):
    # the kernel's clamp is the subject: fused though it holds under half of the toy's compute ops
    monkeypatch.setattr(numpy_regions, "MIN_SHARE", 0.0)
    traced, ref = ofi(inverted_clamp, (torch.randn(8),)), jit(inverted_clamp, (torch.randn(8),))
    assert programs(traced)
    for x in (torch.randn(8), torch.randn(3, 4), SPECIAL):
        torch.testing.assert_close(traced(x), inverted_clamp(x), equal_nan=True)
        torch.testing.assert_close(traced(x), ref(x), equal_nan=True)


def test_programs_called_from_several_threads_give_each_its_own_answer():
    from concurrent.futures import ThreadPoolExecutor
    traced = ofi(chain, (torch.randn(16),))
    assert programs(traced)
    inputs = [torch.randn(n) for n in (16, 5, 300, 4096, 1, 77, 64, 2000)] * 8
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(traced, inputs))
    for x, got in zip(inputs, outs):
        exact(got, chain(x))


def wide(*xs):
    acc = torch.sin(xs[0])
    for x in xs[1:]:
        acc = acc + torch.sin(x) * 0.5
    return acc


def test_a_tree_numexpr_cannot_compile_runs_as_ufunc_steps():
    """260 leaves need more than the 255 registers of numexpr's VM: optimize_for_inference still works."""
    xs = tuple(torch.randn(8) for _ in range(260))
    traced = ofi(wide, xs)
    ys = tuple(torch.randn(5) for _ in range(260))
    torch.testing.assert_close(traced(*ys), wide(*ys), rtol=1e-5, atol=1e-5)


def deep(x):
    for _ in range(450):
        x = torch.abs(x) * 0.9 - 0.05
    return x


def test_a_very_deep_tree_still_optimizes_and_matches_eager():
    traced = ofi(deep, (torch.randn(8),))
    assert len(programs(traced)) >= 3   # 1350 ops cut by depth into several programs
    for x in (torch.randn(8), torch.randn(3, 5)):
        exact(traced(x), deep(x))
