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
