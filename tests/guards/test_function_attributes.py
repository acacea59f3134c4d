"""A function held as a module attribute and rebound after the trace (trace/callable_attrs.py): eager calls the new
function; the program traced again (live, optimized) or, without its original, raised GuardError naming the
attribute. Before: the old function's ops at every call, silently (torch.jit.trace too)."""
from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import tracejit
from trace_testlib import quiet


class Activated(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = torch.relu

    def forward(self, x):
        return self.act(x) + 1


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = functools.partial(torch.mul, other=2.0)

    def forward(self, x):
        return self.scale(x)


class Scored(nn.Module):
    def __init__(self):
        super().__init__()
        self.score = lambda q: q * 2.0

    def forward(self, x):
        return self.score(x).sum(-1)


class Outer(nn.Module):
    """The attribute on a submodule of the user's own class."""

    def __init__(self):
        super().__init__()
        self.inner = Activated()

    def forward(self, x):
        return self.inner(x) * 3


CASES = [(Activated, lambda m: setattr(m, "act", torch.tanh)),
         (Scaled, lambda m: setattr(m, "scale", functools.partial(torch.mul, other=5.0))),
         (Scored, lambda m: setattr(m, "score", lambda q: q * 7.0)),
         (Outer, lambda m: setattr(m.inner, "act", torch.sigmoid))]


@pytest.mark.parametrize("cls,rebind", CASES, ids=[c.__name__ for c, _ in CASES])
def test_rebound_function_attribute_gives_eager_answer(cls, rebind):
    m = cls().eval()
    x = torch.randn(3, 4)
    traced = quiet(tracejit.trace, m, (x,))
    optimized = quiet(tracejit.optimize_for_inference, traced)
    before = m(x)
    torch.testing.assert_close(traced(x), before)
    rebind(m)
    after = m(x)
    assert not torch.allclose(after, before)   # eager's answer moved
    torch.testing.assert_close(quiet(traced, x), after)
    torch.testing.assert_close(quiet(optimized, x), after)


def test_the_check_names_the_attribute():
    m = Activated().eval()
    traced = quiet(tracejit.trace, m, (torch.randn(3, 4),))
    checks = traced.graph.memory_checks
    assert checks is not None and checks.what_changed() == ""
    m.act = torch.tanh
    assert "`self.act`" in checks.what_changed() and "relu" in checks.what_changed()


def test_an_unchanged_function_attribute_needs_no_retrace():
    m = Activated().eval()
    traced = quiet(tracejit.trace, m, (torch.randn(3, 4),))
    for n in (2, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(traced(x), m(x))
    assert len(traced.specializations) == 1


def test_forward_written_function_attribute_is_not_checked():
    class Setter(nn.Module):
        def forward(self, x):
            self.fn = torch.relu   # written by forward before its read: python_state's business, not a check here
            return self.fn(x)

    m = Setter().eval()
    traced = quiet(tracejit.trace, m, (torch.randn(3),), allow_frozen_python_state=True)
    checks = traced.graph.memory_checks
    assert checks is None or all(name != "fn" for _, name, _, _ in checks.items)


ACT = torch.relu


class GlobalActivated(nn.Module):
    def forward(self, x):
        return ACT(x) * 2   # a module-level name holding a function


def test_rebound_global_function_gives_eager_answer():
    global ACT
    m = GlobalActivated().eval()
    x = torch.randn(3, 4)
    traced = quiet(tracejit.trace, m, (x,))
    before = m(x)
    try:
        ACT = torch.tanh
        after = m(x)
        assert not torch.allclose(after, before)
        torch.testing.assert_close(quiet(traced, x), after)
        assert "global `ACT`" in traced.graph.memory_checks.what_changed()
    finally:
        ACT = torch.relu
    torch.testing.assert_close(quiet(traced, x), before)
