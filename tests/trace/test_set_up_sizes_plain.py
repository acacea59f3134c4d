"""A size forward leaves in an attribute of the module (a first-call set-up: ``self.n0 = x.shape[0]``, a lazy
``self.hw = None`` filled with ``x.shape[-2:]``) is a plain int after the trace, as after an eager call. Before
hunt29 the first-call set-up (trace/attempts.py's second run) left tracejit's TracedInt there, naming a finished
recording: ``pickle.dumps(model)`` and ``torch.save(model, ...)`` of the ORIGINAL then failed
("args[0] from __newobj__ args has the wrong class"); eager and torch.jit.trace leave ints."""
from __future__ import annotations

import io
import pickle
import warnings

import pytest
import torch
from torch import nn

import tracejit


class SetsUpFromShapes(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.hw = None   # a lazy set-up: None before the first call

    def forward(self, x):
        if not hasattr(self, "n0"):   # a first-call set-up: an attribute the module did not have
            self.n0 = x.shape[0]
            self.sizes = [x.shape[0], x.shape[1]]
        if self.hw is None:
            self.hw = x.shape[-2:]
        return self.lin(x)[: self.n0]


@pytest.mark.parametrize("check_trace", [True, False])
def test_sizes_set_up_by_forward_are_plain_ints_and_the_module_pickles(check_trace):
    model, eager = SetsUpFromShapes(), SetsUpFromShapes()
    eager.load_state_dict(model.state_dict())
    example = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, example, check_trace=check_trace)
    eager(example)
    for attr in ("n0", "sizes", "hw"):
        assert type(getattr(model, attr)) is type(getattr(eager, attr))
        assert getattr(model, attr) == getattr(eager, attr)
    assert all(type(v) is int for v in list(model.sizes) + list(model.hw) + [model.n0])
    pickle.dumps(model)
    torch.save(model, io.BytesIO())
    x = torch.randn(5, 4)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), eager(x))
