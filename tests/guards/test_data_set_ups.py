"""A tensor attribute set on the first call from the input's DATA (a calibration: ``self.scale = None``, then
``if self.scale is None: self.scale = x.abs().max().detach()``) is what eager's later calls reuse. Before hunt29 the
trace recorded that first call (python_state left plain tensor attributes set in forward to the recording), so the
program computed the scale from every new input, silently (torch.jit.trace too). Now it is a first-call set-up
(trace/data_set_ups.py): the next call is recorded, reading the stored tensor."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit


class Calibrates(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = None

    def forward(self, x):
        if self.scale is None:
            self.scale = x.abs().max().detach()
        return x / self.scale


class SizesOnly(nn.Module):
    """A tensor attribute rebuilt from sizes alone stays recorded as it is built (a rotary cache): unchanged."""

    def __init__(self):
        super().__init__()
        self.pos = None

    def forward(self, x):
        self.pos = torch.arange(x.shape[0]).float()[:, None]
        return x + self.pos


@pytest.mark.parametrize("check_trace", [True, False])
def test_a_set_up_from_the_first_inputs_data_is_reused_as_in_eager(check_trace):
    model, eager = Calibrates(), Calibrates()
    example = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, example, check_trace=check_trace)
    eager(example)
    torch.testing.assert_close(model.scale, eager.scale)
    for x in (torch.randn(5, 4) * 10, torch.randn(2, 4)):
        torch.testing.assert_close(traced(x), eager(x))
    assert not torch.allclose(eager(x), x / x.abs().max())   # the stored scale, not this input's


def test_a_tensor_attribute_rebuilt_from_sizes_follows_new_sizes():
    model = SizesOnly()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, torch.randn(2, 4))
        for x in (torch.randn(5, 4), torch.randn(2, 4)):
            torch.testing.assert_close(traced(x), SizesOnly()(x))
