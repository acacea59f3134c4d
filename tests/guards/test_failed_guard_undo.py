"""A failed guard leaves no trace (issue #20.3): what a program wrote in place before a guard that
fails is put back, so the caller's tensors, the module's buffers and gradients end as one eager
call leaves them: live (retrace or another specialization) and loaded (another specialization,
or a GuardError with nothing changed)."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit
from trace_testlib import roundtrip


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def scale_then_branch(img):
    img.div_(255)
    if img.size(0) > 2:
        return img * 2
    return img - 1


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        self.count.add_(1)
        if self.count.item() > 2.5:
            return self.lin(x) * 2
        return self.lin(x)


class ScaleInSubmodule(nn.Module):
    """The write happens in a submodule; the guard in the root, after it."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Identity()
        self.lin = nn.Linear(4, 4)

    def forward(self, img):
        img = self.lin(img)
        x = self.inner(img)
        x.mul_(3)
        if x.size(0) > 2:
            return x.relu()
        return x.tanh()


def test_input_written_before_a_failing_size_guard_is_divided_once_live_and_loaded():
    traced = _quiet(tracejit.trace, scale_then_branch, (torch.rand(4, 3) * 255,), check_trace=False)
    eager_in = torch.rand(2, 3) * 255
    caller = eager_in.clone()
    eager_out = scale_then_branch(eager_in)
    assert not torch.equal(eager_out, caller / 255 * 2)   # the small input takes the other branch
    out = _quiet(traced, caller)
    torch.testing.assert_close(out, eager_out)
    torch.testing.assert_close(caller, eager_in)   # divided by 255 once, not 255 squared
    # loaded with both specializations: chosen per call, the first attempt undone
    loaded = roundtrip(traced)
    eager_again = torch.rand(2, 3) * 255
    again = eager_again.clone()
    torch.testing.assert_close(loaded(again), scale_then_branch(eager_again))
    torch.testing.assert_close(again, eager_again)
    # loaded with the first trace only: GuardError, the caller's tensor as it was passed
    first_only = roundtrip(_quiet(tracejit.trace, scale_then_branch, (torch.rand(4, 3) * 255,), check_trace=False))
    small = torch.rand(2, 3) * 255
    before = small.clone()
    with pytest.raises(tracejit.GuardError):
        first_only(small)
    assert torch.equal(small, before)


def test_buffer_written_before_a_failing_value_guard_counts_once_live_and_loaded():
    torch.manual_seed(0)
    model, eager = Counter(), Counter()
    eager.load_state_dict(model.state_dict())
    traced = _quiet(tracejit.trace, model, torch.randn(2, 3), check_trace=False)   # count 0 -> 1 while tracing
    eager(torch.randn(2, 3))
    assert traced.count.item() == eager.count.item() == 1
    loaded = roundtrip(traced)   # the first trace only: it relies on `count.item() == 1` after the add
    for _ in range(4):   # counts 2, 3, 4, 5: each fails the guards made so far after the add: retrace
        x = torch.randn(2, 3)
        torch.testing.assert_close(_quiet(traced, x), eager(x))
        assert traced.count.item() == eager.count.item()   # +1 per call, not +2
    assert len(traced.specializations) == 5
    with pytest.raises(tracejit.GuardError):
        loaded(torch.randn(2, 3))
    assert loaded.count.item() == 1   # the add before the failed guard was undone
    # saved after specializing: the file holds counts 1..5; a count it holds runs, one it lacks changes nothing
    loaded = roundtrip(traced)
    loaded.count.fill_(2)
    eager.count.fill_(2)
    x = torch.randn(2, 3)
    torch.testing.assert_close(loaded(x), eager(x))
    assert loaded.count.item() == eager.count.item() == 3
    loaded.count.fill_(5)
    with pytest.raises(tracejit.GuardError, match="no specialization fits"):
        loaded(torch.randn(2, 3))
    assert loaded.count.item() == 5


def test_write_in_a_submodule_before_a_root_guard_is_undone_with_gradients():
    torch.manual_seed(0)
    model = ScaleInSubmodule()
    traced = _quiet(tracejit.trace, model, torch.randn(5, 4), check_trace=False)
    # the write goes into the linear's output: fresh each call, nothing of the caller's to put back
    assert traced._traced_methods["forward"].undo is None
    a = torch.randn(2, 4, requires_grad=True)
    out = _quiet(traced, a)
    out.sum().backward()
    b = a.detach().clone().requires_grad_(True)
    model(b).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_non_leaf_input_written_then_guard_fails_gives_eager_gradients():
    traced = _quiet(tracejit.trace, scale_then_branch, (torch.rand(4, 3) * 255,), check_trace=False)
    assert traced._fn.undo is not None and traced._fn.undo.inputs
    a = torch.rand(2, 3, requires_grad=True)
    x = a * 255                      # a tensor with history, written in place by the program
    out = _quiet(traced, x)
    out.sum().backward()
    b = a.detach().clone().requires_grad_(True)
    y = b * 255
    eager = scale_then_branch(y)
    eager.sum().backward()
    torch.testing.assert_close(out, eager)
    torch.testing.assert_close(x, y)
    torch.testing.assert_close(a.grad, b.grad)   # 1/255: the undone attempt adds nothing
    assert not torch.allclose(a.grad, torch.full_like(a, 2.0))   # the other branch's gradient would be 2


def test_write_through_a_view_of_the_input_is_undone():
    def bump_row(x):
        x[0].add_(10)
        if x.size(1) > 3:
            return x.sum(1)
        return x.mean(1)

    traced = _quiet(tracejit.trace, bump_row, (torch.zeros(2, 5),), check_trace=False)
    x = torch.randn(3, 2)
    y = x.clone()
    torch.testing.assert_close(_quiet(traced, x), bump_row(y))
    torch.testing.assert_close(x, y)   # row 0 bumped once


def test_programs_without_writes_before_a_guard_pay_nothing():
    def plain(x):
        if x.size(0) > 2:
            return x * 2
        return x.add_(1)   # a write after the last guard: nothing to undo

    traced = _quiet(tracejit.trace, plain, (torch.zeros(4, 2),), check_trace=False)
    assert traced._fn.undo is None
    assert _quiet(tracejit.trace, Counter(), torch.randn(2, 3), check_trace=False)._traced_methods["forward"].undo \
        is not None
