"""A module whose first call only sets itself up (an attribute it did not have: transformers' output capturing
installs its hooks and sets ``_output_capturing_hooks_installed``) is traced from a second run, which starts from
the state the first left, as eager's second call (trace/attempts.py, python_state.FirstCallSetUpError). Before
session 28 the trace was refused with "call the module once with the same arguments before tracing". State that
changes on every call is still refused: the second run's own checks see it."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import tracejit


class ScaleOnFirstCall(nn.Module):
    """Sets its scale from the first input's width, then keeps it (eager's later calls use the first width)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if not hasattr(self, "scale"):
            self.scale = float(x.shape[0]) ** -0.5
        return self.lin(x) * self.scale


class CountsCalls(nn.Module):
    def forward(self, x):
        if not hasattr(self, "calls"):
            self.calls = 0
        self.calls += 1
        return x * self.calls


def test_a_first_call_set_up_is_traced_from_the_state_it_leaves():
    torch.manual_seed(0)
    model = ScaleOnFirstCall()
    twin = copy.deepcopy(model)
    example = torch.randn(4, 8)
    with torch.no_grad():
        traced = tracejit.trace(model, example)
        twin(example)   # eager after its first call: the state the trace recorded from
        assert model.scale == twin.scale == 0.5
        for n in (4, 9):
            x = torch.randn(n, 8)
            torch.testing.assert_close(traced(x), twin(x), rtol=0, atol=0)


def test_state_that_changes_on_every_call_is_still_refused():
    with torch.no_grad(), pytest.raises(tracejit.TraceError, match="`calls`"):
        tracejit.trace(CountsCalls(), torch.ones(3))


transformers = pytest.importorskip("transformers")


def test_a_fresh_bert_with_hidden_states_traces_without_an_eager_call_first(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64)
    model = transformers.BertModel(cfg).eval()
    ids = torch.randint(3, 100, (2, 8))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, example_kwarg_inputs={"input_ids": ids, "output_hidden_states": True},
                                strict=False)
        assert model._output_capturing_hooks_installed is True   # as after one eager call
        tracejit.save(traced, tmp_path / "bert.tj")
        loaded = tracejit.load(tmp_path / "bert.tj")
        new = torch.randint(3, 100, (3, 13))
        ref = model(input_ids=new, output_hidden_states=True)
        assert len(ref.hidden_states) == 3
        for program in (traced, loaded):
            got = program(input_ids=new, output_hidden_states=True)
            for a, b in zip(got.hidden_states + (got.last_hidden_state,), ref.hidden_states + (ref.last_hidden_state,)):
                torch.testing.assert_close(a, b, rtol=0, atol=0)
