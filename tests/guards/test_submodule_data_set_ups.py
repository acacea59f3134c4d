"""A tensor a SUBMODULE sets on its first call from the input's data (``self.inner.scale``, ``self.cache =
x.detach().clone()``) is what eager's later calls reuse (hunt30). Before, the submodule's call frame was gone when
the root's Python state was compared (trace/data_set_ups.py looked only at the root frame): the program recomputed
the tensor from every input (with ``check_trace=False``, silently; with the check, a TracingCheckError); torch.jit's
tracer recomputes it too. Now it is a first-call set-up, as on the root: the next call is recorded, reading the
stored tensor, live, loaded and optimized."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit
from trace_testlib import quiet, roundtrip


class Calibrates(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = None

    def forward(self, x):
        if self.scale is None:
            self.scale = x.abs().max().detach()
        return x / self.scale


class Caches(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = None

    def forward(self, x):
        if self.cache is None:
            self.cache = x.detach().clone()
        return x + self.cache


class Model(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(self.inner(x)) * 2


def _pair(inner_cls):
    torch.manual_seed(0)
    model = Model(inner_cls()).eval()
    torch.manual_seed(0)
    eager = Model(inner_cls()).eval()
    return model, eager


@pytest.mark.parametrize("inner_cls", [Calibrates, Caches])
@pytest.mark.parametrize("check_trace", [True, False])
def test_a_submodules_set_up_from_data_is_reused_as_in_eager(inner_cls, check_trace):
    model, eager = _pair(inner_cls)
    example = torch.randn(2, 4)
    with torch.no_grad():
        traced = quiet(tracejit.trace, model, example, check_trace=check_trace)
        eager(example)   # the one call the trace made
        loaded = roundtrip(traced)
        optimized = quiet(tracejit.optimize_for_inference, traced)
        for x in (torch.randn(2, 4) * 10, torch.randn(2, 4)):
            expected = eager(x)
            recomputed = Model(inner_cls()).eval()
            recomputed.load_state_dict(eager.state_dict())
            assert not torch.allclose(expected, recomputed(x))   # the stored tensor, not this input's
            torch.testing.assert_close(traced(x), expected)
            torch.testing.assert_close(loaded(x), expected)
            torch.testing.assert_close(optimized(x), expected)


def test_torch_jit_trace_recomputes_the_submodules_set_up():
    """The reference: torch.jit.trace records the first call, so the stored scale is recomputed per input."""
    model, eager = _pair(Calibrates)
    example = torch.randn(2, 4)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jitted = torch.jit.trace(model, example, check_trace=False)
        eager(example)
        x = torch.randn(2, 4) * 10
        assert not torch.allclose(jitted(x), eager(x))
