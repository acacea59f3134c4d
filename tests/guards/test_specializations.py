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


def test_the_first_trace_is_never_dropped_and_save_writes_every_kept_one():
    traced = quiet(tracejit.trace, range_loop, torch.randn(1, 3))
    for n in range(2, 14):   # 12 other lengths through a cache of 8
        x = torch.randn(n, 3)
        torch.testing.assert_close(quiet(traced, x), range_loop(x))
    assert traced._specializations.first in traced._specializations.entries
    kept = sorted(int(s.reason.rsplit("now ", 1)[1]) for s in traced.specializations[:-1])
    assert kept == list(range(7, 14))   # the least recently used were dropped
    first_code = traced.code
    loaded = roundtrip(traced)
    assert traced.code == first_code   # saving does not change what the object runs
    assert len(loaded.specializations) == 8
    for n in [1] + kept:   # the example's length and every kept one, chosen per call without an original
        x = torch.randn(n, 3)
        torch.testing.assert_close(loaded(x), range_loop(x))
    with pytest.raises(tracejit.GuardError, match=r"no specialization fits these inputs \(8 tried"):
        loaded(torch.randn(3, 3))   # a length whose specialization was dropped


def test_save_after_specializing_a_module_writes_every_method_with_its_specializations():
    class TwoMethods(nn.Module):
        def forward(self, x):
            return size_branch(x)

        def other(self, x):
            return size_branch(x) * 3

    m = TwoMethods()
    traced = quiet(tracejit.trace_module, m, {"forward": torch.randn(5, 2), "other": torch.randn(5, 2)})
    small = torch.randn(2, 2)
    big = torch.randn(6, 2)
    assert torch.equal(m(small), small - 1) and torch.equal(m(big), big * 2)   # the two sizes take two branches
    assert torch.equal(quiet(traced.other, small), m.other(small))   # only `other` specialized
    loaded = roundtrip(traced)
    assert torch.equal(loaded(big), m(big)) and torch.equal(loaded.other(big), m.other(big))
    assert torch.equal(loaded.other(small), m.other(small))   # the file holds other's specialization
    with pytest.raises(tracejit.GuardError):
        loaded(small)                                          # forward never made one
    assert len(loaded.other.specializations) == 2 and len(loaded.specializations) == 1
    assert torch.equal(quiet(traced, small), m(small))   # the live object still specializes after the save


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


class _Pool(nn.Module):
    """Image model with a size branch: 8x8 images are pooled, smaller ones are not."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        y = self.conv(x).relu()
        if y.size(-1) > 6:
            y = nn.functional.max_pool2d(y, 2) * 3
        return self.head(y.mean((2, 3)))


def test_optimized_program_runs_the_example_after_a_retrace_on_another_shape():
    torch.manual_seed(0)
    m = _Pool().eval()
    example, other = torch.randn(1, 3, 8, 8), torch.randn(2, 3, 5, 5)
    traced = quiet(tracejit.trace, m, example)
    with torch.no_grad():
        assert not torch.allclose(m(example), m.head(m.conv(example).relu().mean((2, 3))))   # the branch moves it
        torch.testing.assert_close(quiet(traced, other), m(other))   # a retrace for the small image
        for program in (tracejit.optimize_for_inference(traced), tracejit.freeze(traced)):
            torch.testing.assert_close(program(example), m(example), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(program(other), m(other), atol=1e-5, rtol=1e-5)   # kept too
            assert len(program.specializations) == 2
        ort = tracejit.optimize_for_inference(traced, backend="onnxruntime")
        torch.testing.assert_close(ort(example), m(example), atol=1e-5, rtol=1e-5)   # the example's trace


def test_a_specialization_runs_its_own_code_and_never_replaces_the_first():
    torch.manual_seed(0)
    m = _Pool().eval()
    traced = quiet(tracejit.trace, m, torch.randn(1, 3, 8, 8))
    first_forward, conv_forward = traced._traced_methods["forward"], traced.conv._traced_methods["forward"]
    first_code = traced.code
    quiet(traced, torch.randn(1, 3, 4, 4))
    newest = traced.specializations[0]
    assert "._modules[" not in newest.code or ".forward(" not in newest.code   # submodule calls inlined
    assert "tracejit::call_module" not in str(newest.graph)
    assert traced._traced_methods["forward"] is first_forward and traced.conv._traced_methods["forward"] is conv_forward
    assert traced.code == first_code
    x = torch.randn(1, 3, 4, 4)
    torch.testing.assert_close(traced(x), m(x))


def test_a_deep_copy_chooses_among_the_same_specializations_and_retraces_with_its_own_weights():
    import copy
    torch.manual_seed(0)
    m = _Pool().eval()
    traced = quiet(tracejit.trace, m, torch.randn(1, 3, 8, 8))
    quiet(traced, torch.randn(1, 3, 5, 5))
    twin, m2 = copy.deepcopy(traced), copy.deepcopy(m)
    with torch.no_grad():
        twin.head.weight.mul_(2)
        m2.head.weight.mul_(2)
    assert len(twin.specializations) == 2
    for shape in ((1, 3, 8, 8), (1, 3, 5, 5)):
        x = torch.randn(*shape)
        torch.testing.assert_close(twin(x), m2(x))
        torch.testing.assert_close(traced(x), m(x))   # the original keeps its weights
    x = torch.randn(1, 3, 5, 5)
    torch.testing.assert_close(quiet(twin.train(), x), m2.train()(x))   # a retrace of the copy uses its weights
    assert len(twin.specializations) == 3 and len(traced.specializations) == 2


def test_a_retrace_is_always_tried_before_the_call_gives_up(monkeypatch):
    """The last round of ``SpecializationSet.handle`` may retrace; its new specialization is then tried, not
    dropped for a GuardError (under 8 threads and a training flag flipping every millisecond a call's rounds ran
    out right after its own retrace, about one run in 20 of tests/threads)."""
    from tracejit.runtime import specialize
    monkeypatch.setattr(specialize, "_ROUNDS", 1)   # one retrace, as the last of 8 rounds would be
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(net, (torch.randn(2, 4),))
        net.train()
        traced.train()
        x = torch.randn(3, 4)
        torch.manual_seed(1)
        want = net(x)
        torch.manual_seed(1)
        got = traced(x)   # the eval trace's training guard fails: one retrace in train mode, then run
    torch.testing.assert_close(got, want)
    assert len(traced.specializations) == 2
