"""A trace refused after a SECOND recording run leaves the model as after ONE eager call (hunt30;
trace/rewind_state.py). Before, the second run's own Python changes stayed on the user's model beside the
TraceError (a counter read one call more than eager's; a list held one item more)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit
from escape_models import Inner


class SetsUpThenCounts(nn.Module):
    """The first call only installs itself (a set-up: tracejit runs forward again); every later call counts and
    logs, which no program can replay: refused."""

    def __init__(self):
        super().__init__()
        self.calls = 0
        self.log = []

    def forward(self, x):
        if not hasattr(self, "_installed"):
            self._installed = True
        else:
            self.calls += 1
            self.log.append(self.calls)
            self.extra = "set by a later call"
        return x * 2


class EscapesThenCounts(nn.Module):
    """A tensor escapes the submodule's call on the first run (forward runs again, traced through); the counter
    moves only on later calls."""

    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.calls = 0

    def forward(self, x):
        if hasattr(self, "_ready"):
            self.calls += 1
            self.inner.register_forward_hook(lambda *a: None)
        self._ready = True
        store = []
        return self.inner(x, store) + store[0]


def _visible(m):
    return {k: (list(v) if isinstance(v, list) else v) for k, v in vars(m).items()
            if k in ("calls", "log", "extra", "_installed", "_ready")} | {"hooks": len(m.inner._forward_hooks)
                                                                         if hasattr(m, "inner") else 0}


@pytest.mark.parametrize("cls", [SetsUpThenCounts, EscapesThenCounts])
def test_a_refused_second_run_leaves_the_state_of_one_eager_call(cls):
    model, eager = cls(), cls()
    with torch.no_grad():
        with pytest.raises(tracejit.TraceError, match="calls"):
            tracejit.trace(model, torch.ones(2, 4))
        eager(torch.ones(2, 4))
    assert _visible(model) == _visible(eager)
    assert model.calls == 0
