"""The specialization cache, GuardError, guards=False / "shapes", the training guard, guards in .graph/.code."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit
from patterns import TrainingBranch, item_scale, range_loop, size_branch, value_branch
from trace_testlib import marker_lines, quiet, roundtrip

import patterns

line_of = marker_lines(patterns.__file__)


def test_guard_error_is_a_runtime_error():
    assert issubclass(tracejit.GuardError, RuntimeError)


def test_new_specialization_warns_with_the_guard_and_line():
    traced = quiet(tracejit.trace, size_branch, torch.randn(5, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced(torch.randn(2, 2))
    texts = [(str(w.message), w.filename, w.lineno) for w in caught if issubclass(w.category, tracejit.TracerWarning)]
    assert len(texts) == 1, texts
    text, filename, lineno = texts[0]
    assert filename == patterns.__file__ and lineno == line_of("size_branch")
    assert "guard failed" in text and "if x.size(0) > 3:" in text and "trace value 5, now 2" in text
    assert len(traced.specializations) == 2
    assert "if x.size(0) > 3:" in traced.specializations[0].reason


def test_a_branch_on_a_size_holds_for_the_whole_range(device):
    """``s0 > 3`` guards exactly that predicate: every s0 > 3 reuses the first trace."""
    traced = quiet(tracejit.trace, size_branch, torch.randn(5, 2, device=device))
    for n in (4, 6, 9, 50):
        x = torch.randn(n, 2, device=device)
        assert torch.equal(traced(x), size_branch(x))
    assert len(traced.specializations) == 1
    assert traced._specializations.traces == 0


def test_specializing_never_retraces_on_every_call(device):
    """A value guard (on CUDA: a device sync per call) picks the specialization of each branch."""
    traced = quiet(tracejit.trace, value_branch, torch.ones(3, device=device))
    pos, neg = torch.tensor([1.0, 2.0], device=device), torch.tensor([-1.0, -2.0], device=device)
    for _ in range(10):
        assert torch.equal(quiet(traced, neg), value_branch(neg))
        assert torch.equal(quiet(traced, pos), value_branch(pos))
    assert traced._specializations.traces == 1   # one retrace for the other branch, then both are cached
    assert len(traced.specializations) == 2


def test_the_cache_is_bounded():
    traced = quiet(tracejit.trace, range_loop, torch.randn(1, 3))
    for n in range(2, 14):   # range(s0) guards s0 == n: one specialization per length
        x = torch.randn(n, 3)
        torch.testing.assert_close(quiet(traced, x), range_loop(x))
    assert len(traced.specializations) == 8
    x = torch.randn(13, 3)   # the most recent ones are kept: no retrace
    before = traced._specializations.traces
    torch.testing.assert_close(traced(x), range_loop(x))
    assert traced._specializations.traces == before


def test_the_first_trace_is_never_dropped_and_is_what_save_writes():
    traced = quiet(tracejit.trace, range_loop, torch.randn(1, 3))
    for n in range(2, 14):   # 12 other lengths through a cache of 8
        x = torch.randn(n, 3)
        torch.testing.assert_close(quiet(traced, x), range_loop(x))
    assert traced._specializations.first in traced._specializations.entries
    ran_last = traced.code
    loaded = roundtrip(traced)
    assert traced.code == ran_last   # saving does not change what the object runs
    one = torch.randn(1, 3)
    torch.testing.assert_close(loaded(one), range_loop(one))   # the trace of the example (length 1)
    with pytest.raises(tracejit.GuardError, match="value now: 13"):
        loaded(torch.randn(13, 3))   # not the specialization that ran last


def test_save_after_specializing_a_module_writes_every_method_as_first_traced():
    class TwoMethods(nn.Module):
        def forward(self, x):
            return size_branch(x)

        def other(self, x):
            return size_branch(x) * 3

    m = TwoMethods()
    traced = quiet(tracejit.trace_module, m, {"forward": torch.randn(5, 2), "other": torch.randn(5, 2)})
    small = torch.randn(2, 2)
    assert torch.equal(quiet(traced, small), m(small)) and torch.equal(quiet(traced.other, small), m.other(small))
    loaded = roundtrip(traced)
    big = torch.randn(6, 2)
    assert torch.equal(loaded(big), m(big)) and torch.equal(loaded.other(big), m.other(big))
    with pytest.raises(tracejit.GuardError):
        loaded.other(small)
    assert torch.equal(quiet(traced.other, big), m.other(big))   # still specializes after the save


def test_drop_original_then_guard_error():
    traced = quiet(tracejit.trace, size_branch, torch.randn(5, 2))
    traced.drop_original()
    with pytest.raises(tracejit.GuardError) as info:
        traced(torch.randn(2, 2))
    e = info.value
    assert e.expected is True and e.seen == 2 and e.source.lineno == line_of("size_branch")
    assert "`size > 3` was True" in str(e) and "value at trace time: 5" in str(e) and "value now: 2" in str(e)


def test_loaded_value_guard_names_values():
    loaded = roundtrip(quiet(tracejit.trace, item_scale, torch.tensor([1.0, 2.0])))
    with pytest.raises(tracejit.GuardError) as info:
        loaded(torch.tensor([3.0, 2.0]))
    assert info.value.expected == 2.0 and info.value.seen == 3.0
    assert "x.max().item()" in str(info.value)   # the user's source line
    y = torch.tensor([0.5, 2.0])   # same max: the guard passes, eager's answer
    assert torch.equal(loaded(y), item_scale(y))


def test_guards_print_in_graph_and_code():
    traced = quiet(tracejit.trace, size_branch, torch.randn(5, 2))
    assert "tracejit::guard[kind='size', test='gt', expected=True]" in str(traced.graph)
    assert "if not (size > 3): _tj_guard(0, size)" in traced.code


def test_guards_false_keeps_no_guard_and_never_raises():
    traced = quiet(tracejit.trace, value_branch, torch.ones(3), guards=False)
    assert "tracejit::guard" not in str(traced.graph)
    neg = -3 * torch.ones(3)
    # the documented risk: the traced branch is used (the old behaviour, as torch.jit.trace)
    assert torch.equal(traced(neg), neg * 2) and not torch.equal(traced(neg), value_branch(neg))


def test_guards_shapes_keeps_size_guards_drops_value_guards():
    def both(x):
        if x.size(0) > 2:
            return x * x.max().item()
        return x
    traced = quiet(tracejit.trace, both, torch.randn(4), guards="shapes")
    kinds = [n.attrs["kind"] for n in traced.graph.nodes if n.op == "tracejit::guard"]
    assert kinds == ["size"]
    assert ".item() !=" not in traced.code
    x = torch.randn(2)
    assert torch.equal(quiet(traced, x), both(x))   # the size guard still retraces
    with pytest.raises(ValueError, match="guards must be"):
        tracejit.trace(both, torch.randn(4), guards="values")


def test_training_flag_is_a_guard_and_loaded_program_refuses_other_mode():
    torch.manual_seed(0)
    m = TrainingBranch().eval()
    traced = quiet(tracejit.trace, m, torch.randn(2, 4))
    guards = [n for n in traced.graph.nodes if n.op == "tracejit::guard"]
    assert guards[0].attrs["kind"] == "training" and guards[0].attrs["expected"] is False
    x = torch.randn(3, 4)
    m.train()
    traced.train()
    torch.testing.assert_close(quiet(traced, x), m(x))   # in memory: traced again in train mode
    loaded = roundtrip(quiet(tracejit.trace, m.eval(), torch.randn(2, 4)))
    loaded.train()
    with pytest.raises(tracejit.GuardError, match=r"traced in eval mode.*Switch it back with \.eval\(\)"):
        loaded(x)
    torch.testing.assert_close(loaded.eval()(x), m.eval()(x))


def test_guard_in_a_submodule_fails_the_whole_call_and_retraces():
    class Inner(nn.Module):
        def forward(self, x):
            if x.size(0) > 3:
                return x.relu()
            return x.tanh()

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return self.inner(self.lin(x))

    torch.manual_seed(0)
    m = Outer().eval()
    traced = quiet(tracejit.trace, m, torch.randn(5, 2))   # batch 5: relu
    x = torch.randn(2, 2)   # batch 2: tanh
    torch.testing.assert_close(quiet(traced, x), m(x))
    assert not torch.allclose(m.inner.forward(m.lin(x)), m.lin(x).relu())
    loaded = roundtrip(quiet(tracejit.trace, m, torch.randn(5, 2)))
    with pytest.raises(tracejit.GuardError):
        loaded(x)


def test_ledger_entries_point_at_their_guards():
    traced = quiet(tracejit.trace, patterns.data_slice, (torch.randn(6, 2), torch.tensor([1, 1, 0])))
    guarded = [e for e in traced.ledger if e.guard is not None]
    assert [e.kind for e in guarded] == ["value_read"]
    node = guarded[0].guard
    assert node.op == "tracejit::guard" and node.attrs["test"] == "int" and node.attrs["expected"] == 2
    assert node in traced.graph.nodes and guarded[0].lineno == line_of("data_slice")
    unguarded = quiet(tracejit.trace, patterns.data_slice, (torch.randn(6, 2), torch.tensor([1, 1, 0])),
                      guards=False)
    assert all(e.guard is None for e in unguarded.ledger) and any(e.kind == "value_read" for e in unguarded.ledger)


def test_trace_module_other_methods_specialize_too():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x)

        def pooled(self, x):
            if x.size(0) > 2:
                return self.lin(x).amax(0)
            return self.lin(x).sum(0)

    torch.manual_seed(0)
    m = Two().eval()
    traced = quiet(tracejit.trace_module, m, {"forward": torch.randn(2, 3), "pooled": torch.randn(4, 3)})
    assert "tracejit::guard" in str(traced.pooled.graph) and "if not (" in traced.pooled.code
    for n in (1, 5, 2):
        x = torch.randn(n, 3)
        torch.testing.assert_close(quiet(traced.pooled, x), m.pooled(x))
        torch.testing.assert_close(traced(x), m(x))
    assert len(traced.pooled.specializations) == 2
    traced.drop_original()
    loaded = roundtrip(quiet(tracejit.trace_module, m, {"forward": torch.randn(2, 3), "pooled": torch.randn(4, 3)}))
    with pytest.raises(tracejit.GuardError):
        loaded.pooled(torch.randn(1, 3))


def test_mode_switch_warning_points_at_the_caller():
    torch.manual_seed(0)
    m = TrainingBranch().eval()
    traced = quiet(tracejit.trace, m, torch.randn(2, 4))
    traced.train()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced(torch.randn(2, 4))
    found = [w for w in caught if issubclass(w.category, tracejit.TracerWarning)]
    assert len(found) == 1 and found[0].filename == __file__ and "eval mode" in str(found[0].message)
