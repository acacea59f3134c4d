"""Config objects hanging off the traced modules, changed after the trace (support/object_checks.py, hunt20 E).

``self.config.output_attentions`` on a dataclass / plain object / SimpleNamespace, flipped on the original's
config after the trace: eager takes the other branch; torch.jit.trace's program (and tracejit's before) silently
kept the trace's. Now the live traced object sees the change (its generated code checks the objects' plain
attributes first) and traces again: eager's answer.
"""
from __future__ import annotations

import dataclasses
import types
import warnings

import pytest
import torch

import tracejit


@dataclasses.dataclass
class DataConfig:
    output_attentions: bool = False
    scale: float = 2.0


class PlainConfig:
    def __init__(self):
        self.output_attentions = False
        self.scale = 2.0


def _namespace():
    return types.SimpleNamespace(output_attentions=False, scale=2.0)


class Layer(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x) * self.config.scale
        if self.config.output_attentions:
            return y + 1
        return y


class Model(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = Layer(config)

    def forward(self, x):
        return self.layer(x)


class Nested(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.config = types.SimpleNamespace(text=types.SimpleNamespace(double=False), name="m")

    def forward(self, x):
        return x * 2 if self.config.text.double else x


MAKERS = [DataConfig, PlainConfig, _namespace]


@pytest.mark.parametrize("make", MAKERS, ids=["dataclass", "plain", "namespace"])
@pytest.mark.parametrize("change", [("output_attentions", True), ("scale", 3.0)], ids=["flag", "scale"])
def test_a_config_value_changed_after_the_trace_gives_eager_s_answer(make, change):
    config = make()
    m = Model(config).eval()
    x = torch.randn(2, 4)
    traced = tracejit.trace(m, (x,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jit = torch.jit.trace(m, (x,))
    setattr(config, *change)
    y = torch.randn(3, 4)
    eager = m(y)
    assert not torch.equal(jit(y), eager)                       # torch.jit: the trace's value, silently
    torch.testing.assert_close(traced(y), eager, rtol=0, atol=0)
    setattr(config, change[0], getattr(make(), change[0]))       # back: the first trace fits again
    torch.testing.assert_close(traced(y), m(y), rtol=0, atol=0)


def test_an_object_one_level_down_is_checked_too():
    m = Nested().eval()
    traced = tracejit.trace(m, (torch.randn(3),))
    m.config.text.double = True
    y = torch.randn(3)
    torch.testing.assert_close(traced(y), m(y), rtol=0, atol=0)


def test_a_model_without_such_objects_has_no_check():
    traced = tracejit.trace(torch.nn.Linear(3, 3).eval(), (torch.randn(2, 3),))
    assert "_tj_py_checks" not in traced.code


SCALE = 2.0
GLOBAL_CONFIG = types.SimpleNamespace(shift=1.0)


def scaled(x):
    return x * SCALE + GLOBAL_CONFIG.shift


def test_module_globals_forward_read_are_checked():
    global SCALE
    traced = tracejit.trace(scaled, (torch.randn(3),))
    y = torch.randn(3)
    try:
        SCALE = 5.0
        torch.testing.assert_close(traced(y), scaled(y), rtol=0, atol=0)
        GLOBAL_CONFIG.shift = -4.0
        torch.testing.assert_close(traced(y), scaled(y), rtol=0, atol=0)
    finally:
        SCALE, GLOBAL_CONFIG.shift = 2.0, 1.0


def env_switch(x):
    import os
    return x * (2 if os.environ.get("TRACEJIT_HUNT20_FLAG") else 3) + (os.getenv("TRACEJIT_HUNT20_B") == "1")


def test_environment_variables_forward_read_are_checked(monkeypatch):
    monkeypatch.delenv("TRACEJIT_HUNT20_FLAG", raising=False)
    monkeypatch.delenv("TRACEJIT_HUNT20_B", raising=False)
    traced = tracejit.trace(env_switch, (torch.randn(3),))
    y = torch.randn(3)
    monkeypatch.setenv("TRACEJIT_HUNT20_FLAG", "1")
    torch.testing.assert_close(traced(y), env_switch(y), rtol=0, atol=0)
    monkeypatch.setenv("TRACEJIT_HUNT20_B", "1")
    torch.testing.assert_close(traced(y), env_switch(y), rtol=0, atol=0)


class ReadsMissing(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def forward(self, x):
        double = getattr(self.config, "double", False) or hasattr(self.config, "twice")
        return x * 2 if double else x + self.config.inner.deep.shift


def _deep():
    return types.SimpleNamespace(inner=types.SimpleNamespace(deep=types.SimpleNamespace(shift=1.0)))


@pytest.mark.parametrize("change", ["getattr_default", "hasattr", "two_levels_down"])
def test_an_attribute_added_since_or_two_levels_down_is_seen(change):
    config = _deep()
    m = ReadsMissing(config)
    x = torch.randn(3)
    traced = tracejit.trace(m, (x,))
    jit = _quiet(torch.jit.trace, m, (x,))
    if change == "getattr_default":
        config.double = True
    elif change == "hasattr":
        config.twice = 1
    else:
        config.inner.deep.shift = -5.0
    assert not torch.equal(jit(x), m(x))
    assert torch.equal(_quiet(traced, x), m(x))


def test_a_private_cache_the_object_fills_does_not_retrace():
    class Holder:
        def __init__(self):
            self._cache = {}
            self.scale = 2.0

        def get(self, n):
            return self._cache.setdefault(n, self.scale)

    class UsesCache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.holder = Holder()

        def forward(self, x):
            return x * self.holder.scale

    m = UsesCache()
    traced = tracejit.trace(m, (torch.randn(3),))
    for n in range(3):
        m.holder.get(n)   # the cache grows between calls: not a change of what forward read
        y = torch.randn(3)
        assert torch.equal(traced(y), m(y))
    assert len(traced.specializations) == 1
