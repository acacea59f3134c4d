"""A retrace must leave the user's model as eager would: hooks the traced code registered stay (hunt27).

A forward that installs hooks once and remembers it in an attribute (transformers' output capturing on the first
call asking for hidden states; ``LazyHooks`` below) ran during a retrace with the hooks swapped in for the trace;
putting the old hook dicts back afterwards dropped the hooks it had just registered while the attribute stayed set.
From then on EAGER answered an empty ``hidden_states`` (``all`` here), silently, and a later retrace traced that
empty answer too. Now the hooks registered during the retrace stay on the original module.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit
from test_late_hooks import LazyHooks


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def test_a_refused_retrace_leaves_the_hooks_forward_installed():
    torch.manual_seed(0)
    net = LazyHooks().eval()
    traced = _quiet(tracejit.trace, net, example_kwarg_inputs={"x": torch.randn(2, 4)}, strict=False)
    x = torch.randn(5, 4)
    with pytest.raises(tracejit.TraceError):   # the retrace installs the hooks: refused (forward set `installed`)
        _quiet(traced, x=x, collect=True)
    assert net.installed
    assert len(net(x, collect=True)["all"]) == 3   # eager still collects (before: 0, its hooks dropped)
    got, want = _quiet(traced, x=x, collect=True), net(x, collect=True)   # traced again, now with the hooks
    assert len(got["all"]) == len(want["all"]) == 3


def test_transformers_hidden_states_asked_after_the_trace_keep_eager_right():
    transformers = pytest.importorskip("transformers")

    class Flat(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return tuple(self.m(ids).values())

    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=64)
    model = Flat(transformers.BertModel(cfg)).eval()
    traced = _quiet(tracejit.trace, model, (torch.randint(0, 60, (1, 6)),), check_trace=False)
    model.m.config.output_hidden_states = True
    for n in (6, 7):
        ids = torch.randint(0, 60, (1, n))
        try:
            got = _quiet(traced, ids)
        except tracejit.TraceError:
            got = None   # a clear refusal is fine; a wrong answer is not
        want = model(ids)
        assert len(want[2]) == cfg.num_hidden_layers + 1   # eager keeps its hooks (before: () from here on)
        if got is not None:
            assert len(got[2]) == len(want[2])
            for g, w in zip(got[2], want[2]):
                torch.testing.assert_close(g, w)
