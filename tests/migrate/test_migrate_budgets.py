"""A program migrated from a TorchScript archive carries the call-time budgets of a program loaded from
a .tjit file (support/call_budget.py): sizes that follow the inputs are checked before the op
allocates, so a crafted archive that eager (and torch.jit) would let allocate gigabytes on a bigger
input is refused with a BudgetError; an ordinary archive computes what eager and the archive compute."""
from __future__ import annotations

import io
import warnings

import pytest
import torch

import tracejit


def _grow(x):   # traced on an empty input: zeros(0); on 8 elements: 8 x 2^30 elements (32 GiB)
    return torch.zeros([x.size(0) * 2 ** 30]) + 1


def _outer(x):   # [n, 1] x [1, n] with n = 2^21 x the input's length: 2^48 elements for 8
    n = x.size(0) * 2 ** 21
    return x[:1].expand(n).view(n, 1) @ x[:1].expand(n).view(1, n)


def _batched(x):   # batch dimensions [n, 1] and [1, n] broadcast: n^2 products
    n = x.size(0) * 2 ** 21
    return torch.matmul(x[:1].expand(n).view(n, 1, 1, 1), x[:1].expand(n).view(1, n, 1, 1))


def _archive(fn, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        script = torch.jit.trace(fn, (example,), check_trace=False)
    buf = io.BytesIO()
    torch.jit.save(script, buf)
    buf.seek(0)
    return script, buf


@pytest.mark.parametrize("fn, op", [(_grow, "zeros"), (_outer, "matmul"), (_batched, "matmul")])
def test_a_crafted_archive_is_refused_before_it_allocates(fn, op):
    script, buf = _archive(fn, torch.randn(0))
    migrated = tracejit.migrate(buf, torch.randn(0))
    torch.testing.assert_close(migrated(torch.randn(0)), fn(torch.randn(0)))   # the example still runs
    assert "_tj_budget" in migrated.code
    with pytest.raises(tracejit.BudgetError, match=rf"aten::{op} at .*test_migrate_budgets.py:\d+ would allocate "
                                                   r"\d+ elements, more than"):
        migrated(torch.randn(8))   # the archive itself (script) would try to allocate it: not called here


def test_an_ordinary_archive_computes_what_eager_and_the_archive_compute_on_other_inputs():
    def fn(x):
        n = x.size(0)
        return torch.zeros([n * 3, 4]) + x.sum(), x.view(n, 1) @ x.view(1, n), x.expand(2, -1).contiguous()

    script, buf = _archive(fn, torch.randn(5))
    migrated = tracejit.migrate(buf, torch.randn(5))
    for n in (1, 7, 300):
        x = torch.randn(n)
        want = fn(x)
        assert want[1].shape == (n, n)   # the input moves the outputs' sizes
        for got in (migrated(x), script(x)):
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w)


def test_a_migrated_program_saved_and_loaded_keeps_the_budget(tmp_path):
    _, buf = _archive(_outer, torch.randn(0))
    path = tmp_path / "outer.tjit"
    tracejit.save(tracejit.migrate(buf, torch.randn(0)), path)
    loaded = tracejit.load(path)
    with pytest.raises(tracejit.BudgetError, match="aten::matmul"):
        loaded(torch.randn(8))


def _chain(x):   # 80 elementwise ops: their step weights pass what a program may run without counting
    for _ in range(40):
        x = torch.sin(x) * 1.5
    return x


def _small(x):
    return torch.relu(x * 2 + 1)


@pytest.mark.parametrize("fn, counts", [(_small, False), (_chain, True)])
def test_a_migrated_program_counts_every_op_only_when_its_ops_could_pass_the_call_total(fn, counts):
    """As a loaded file's program (serialize/budget_plan.py): a small archive skips the per-op count, a long
    chain keeps it; both give eager's answer on another length."""
    _, buf = _archive(fn, torch.randn(5))
    migrated = tracejit.migrate(buf, torch.randn(5))
    assert migrated.forward.graph.call_budget.counting() is counts
    x = torch.randn(9)
    torch.testing.assert_close(migrated(x), fn(x))


def _heavy_for_its_input(x):   # one element in, 2048^3 multiply-adds of factory-made operands
    return x + torch.ones(2048, 2048).matmul(torch.ones(2048, 2048)).sum()


def test_an_archive_whose_traced_call_claims_more_work_than_its_input_allows_is_refused_as_a_file_is():
    """The archive's tensors and its traced call's work set each call's allowance, as for a loaded .tjit file
    (serialize/budget_plan.BudgetPlan.allowance): a call of one element may not claim 8.6e9 multiply-adds."""
    _, buf = _archive(_heavy_for_its_input, torch.randn(1))
    with pytest.raises(tracejit.LoadError, match="its traced call would compute"):
        tracejit.migrate(buf, torch.randn(1))
