"""Random generators of Python's and numpy's held by a module or bound to a global, drawn from in forward (hunt27).

``self.rng = random.Random(0)`` (or ``numpy.random.default_rng(0)``, a ``RandomState``), ``x * self.rng.random()``
in forward: the draw changes the generator's state in C, where no attribute shows it, so python_state saw no
change and the program multiplied by the trace's draw on every call, where eager draws anew (torch.jit.trace the
same). Now the generator is compared by its state (trace/held_state.py): refused like any changed state, with the
opt-out ``allow_frozen_python_state=True``.
"""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import tracejit

GLOBAL_RNG = np.random.default_rng(1)


class GlobalDraw(nn.Module):
    def forward(self, x):
        return x * float(GLOBAL_RNG.random())


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


class HeldGenerators(nn.Module):
    """Random generators held by the module: their draws change their state in C, no attribute shows it."""

    def __init__(self, kind):
        super().__init__()
        self.rng = random.Random(0) if kind == "random" else np.random.default_rng(0) if kind == "numpy" else \
            np.random.RandomState(0)

    def forward(self, x):
        return x * float(self.rng.random()) if not hasattr(self.rng, "random_sample") else x * float(
            self.rng.random_sample())


@pytest.mark.parametrize("kind", ["random", "numpy", "numpy_legacy"])
def test_a_held_random_generator_drawn_in_forward_is_refused(kind):
    # before: the program multiplied by the trace's draw forever, eager by a new draw each call (torch.jit the same)
    model = HeldGenerators(kind).eval()
    with pytest.raises(tracejit.TraceError, match="random generator `rng`") as err:
        _quiet(tracejit.trace, model, (torch.randn(3),), check_trace=False)
    assert f"{__file__}:" in str(err.value)   # the line that drew
    allowed = _quiet(tracejit.trace, model, (torch.randn(3),), check_trace=False, allow_frozen_python_state=True)
    assert any(e.kind == "python_state" for e in allowed.ledger)


def test_a_global_random_generator_drawn_in_forward_is_refused():
    with pytest.raises(tracejit.TraceError, match="GLOBAL_RNG"):
        _quiet(tracejit.trace, GlobalDraw(), (torch.randn(3),), check_trace=False)


def test_a_held_generator_not_drawn_from_traces():
    model = HeldGenerators("numpy").eval()
    model.forward = lambda x: x * 2   # the generator is held but forward does not draw
    traced = _quiet(tracejit.trace, model, (torch.randn(3),))
    x = torch.randn(4)
    torch.testing.assert_close(traced(x), x * 2)
