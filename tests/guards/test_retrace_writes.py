"""A retrace writes in place into captured tensors once per call, not twice (hunt26).

A live traced object whose guard fails traces its original again on the call's inputs and runs the new trace, so
the user's forward runs twice for that call. Buffers were put back after the retrace; a tensor the trace captures
as a constant (a plain tensor attribute, a held helper's cached table, a module-level tensor) was written by both
runs: the program's counter moved twice where eager's moved once, silently, at every retrace. torch.jit.trace
never retraces (its program keeps the first branch), so it is no reference here: eager is.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit

STEPS = torch.zeros(1)   # a module-level step counter a function updates in place


class PlainCounter(nn.Module):
    """``self.count`` is a plain tensor attribute (not registered as a buffer), updated in place."""

    def __init__(self):
        super().__init__()
        self.count = torch.zeros(1)

    def forward(self, x):
        self.count += 1
        if x.shape[0] > 3:   # a size the trace guards: another batch size retraces
            return x.sum(-1) * self.count * 2
        return x.sum(-1) * self.count


def counted(x):
    STEPS.add_(1)
    if x.shape[0] > 3:
        return x * STEPS * 2
    return x * STEPS


def _calls(program, eager, shapes):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for shape in shapes:
            x = torch.randn(shape)
            torch.testing.assert_close(program(x), eager(x), msg=f"call on shape {shape}")


SHAPES = [(2, 3), (5, 3), (5, 3), (2, 3), (6, 3)]


@pytest.mark.parametrize("optimize", [False, True], ids=["live", "optimized"])
def test_a_plain_tensor_attribute_counts_once_per_call_across_retraces(optimize):
    model, twin = PlainCounter().eval(), PlainCounter().eval()
    x = torch.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = tracejit.trace(model, (x,), check_trace=False)
        if optimize:
            program = tracejit.optimize_for_inference(program)
    twin(x)   # the trace ran forward once
    _calls(program, twin, SHAPES)
    assert torch.equal(model.count, twin.count)


def test_a_module_level_tensor_counts_once_per_call_across_retraces():
    STEPS.zero_()
    x = torch.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = tracejit.trace(counted, (x,), check_trace=False)
    expected = STEPS.clone()
    for shape in SHAPES:
        y = torch.randn(shape)
        expected += 1
        want = y * expected * (2 if shape[0] > 3 else 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.testing.assert_close(program(y), want, msg=f"call on shape {shape}")
    assert torch.equal(STEPS, expected)


def test_specialize_for_leaves_captured_tensors_unwritten():
    """``specialize_for`` traces ahead of time: no call happened, so no captured tensor moves."""
    model = PlainCounter().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracejit.trace(model, (torch.randn(2, 3),), check_trace=False, specialize_for=[(torch.randn(5, 3),)])
    assert model.count.item() == 1   # the trace's own call only


SETITEM_COUNTS = torch.zeros(3)


class SetitemCounter(torch.nn.Module):
    """``t[i] = v`` into a module-level tensor: a live retrace (a size guard failed) must put it back, as it
    does for ``t.add_(1)`` (before session 28's hunt29 the subscript write was not noted and counted twice)."""

    def forward(self, x):
        SETITEM_COUNTS[0] = SETITEM_COUNTS[0] + 1
        if x.shape[0] > 2:
            return x * 2
        return x + 1


def test_a_subscript_write_into_a_captured_tensor_is_applied_once_by_a_retrace():
    with torch.no_grad():
        traced = tracejit.trace(SetitemCounter(), torch.randn(2, 4), check_trace=False)
        x = torch.randn(5, 4)   # the size guard fails: the live object traces again
        SETITEM_COUNTS.zero_()
        out = traced(x)
        after_program = SETITEM_COUNTS.clone()
        SETITEM_COUNTS.zero_()
        expected = SetitemCounter()(x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(after_program, SETITEM_COUNTS)   # one write, as one eager call
