"""A tensor held as a plain attribute and captured by the trace, rebound after it (hunt26; trace/attribute_tensors.py).

A diffusers-style scheduler held by the model keeps its ``alphas`` table as a plain tensor attribute; a module keeps
a plain (unregistered) tensor attribute. Rebinding either after the trace (``scheduler.alphas = new_table``): eager
reads the new tensor, the program kept the captured one, silently (torch.jit.trace too). Now the live and optimized
programs trace again, one without its original raises GuardError naming the line that read it. A file keeps no
such check (a file is a snapshot); an attribute forward itself rebinds is not checked (no retrace per call).
"""
from __future__ import annotations

import inspect
import warnings

import pytest
import torch
from torch import nn

import tracejit
from trace_testlib import marker_lines

T = torch.tensor(2)   # the timestep (a tensor: torch.jit.trace takes no int)
LINE = marker_lines(inspect.getsourcefile(inspect.currentframe()))


class Scheduler:                      # a plain object the model holds (diffusers' schedulers)
    def __init__(self):
        self.alphas = torch.linspace(0.99, 0.5, 10).cumprod(0)


class Denoise(nn.Module):
    def __init__(self):
        super().__init__()
        self.scheduler = Scheduler()
        self.gain = torch.ones(3)     # a plain tensor attribute, not a buffer

    def forward(self, x, t):
        a = self.scheduler.alphas[t]  # @alphas
        return (x - (1 - a).sqrt() * x) / a.sqrt() * self.gain  # @gain


class Gridded(nn.Module):
    """Rebinds its tensor attribute in every forward (YOLO-style grid): a value the trace makes, not a capture."""

    def __init__(self):
        super().__init__()
        self.grid = torch.zeros(3)

    def forward(self, x):
        self.grid = torch.arange(x.shape[-1], dtype=x.dtype)
        return x + self.grid


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


@pytest.mark.parametrize("rebind,marker", [
    (lambda m: setattr(m.scheduler, "alphas", torch.linspace(0.9, 0.1, 10).cumprod(0)), "alphas"),
    (lambda m: setattr(m, "gain", torch.full((3,), 2.0)), "gain"),
], ids=["held_object_attribute", "module_plain_attribute"])
def test_a_rebound_tensor_attribute_traces_again(rebind, marker):
    model = Denoise().eval()
    x = torch.randn(3)
    traced = _quiet(tracejit.trace, model, (x, T))
    optimized = tracejit.optimize_for_inference(_quiet(tracejit.trace, model, (x, T)))
    dropped = _quiet(tracejit.trace, model, (x, T))
    dropped.drop_original()
    jit = _quiet(torch.jit.trace, model, (x, T))
    before = model(x, T)
    rebind(model)
    after = model(x, T)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(jit(x, T), before)   # torch.jit.trace: the old tensor, silently
    torch.testing.assert_close(_quiet(traced, x, T), after)
    torch.testing.assert_close(_quiet(optimized, x, T), after)
    with pytest.raises(tracejit.GuardError) as err:
        dropped(x, T)
    assert f"{__file__}:{LINE(marker)}" in str(err.value)


def test_an_attribute_updated_in_place_or_rebound_by_forward_needs_no_retrace():
    model = Denoise().eval()
    x = torch.randn(3)
    traced = _quiet(tracejit.trace, model, (x, T))
    model.gain.mul_(3)   # the captured object itself
    torch.testing.assert_close(traced(x, T), model(x, T))
    gridded = Gridded()
    program = _quiet(tracejit.trace, gridded, (x,))
    for _ in range(3):
        torch.testing.assert_close(program(x), gridded(x))
    assert len(program.specializations) == 1
