"""Config objects hanging off the traced modules, changed after the trace (support/object_checks.py, hunt20 E).

``self.config.output_attentions`` on a dataclass / plain object / SimpleNamespace, flipped on the original's
config after the trace: eager takes the other branch; torch.jit.trace's program (and tracejit's before) silently
kept the trace's. Now the live traced object sees the change (its generated code checks the objects' plain
attributes first) and traces again: eager's answer.
"""
from __future__ import annotations

import dataclasses
import io
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
    assert not [n for n in traced.graph.nodes if n.attrs.get("kind") == "global"]


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def _roundtrip(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


@pytest.mark.parametrize("make", MAKERS, ids=["dataclass", "plain", "namespace"])
def test_the_optimized_program_checks_config_objects(make):
    config = make()
    m = Model(config).eval()
    x = torch.randn(2, 4)
    traced = tracejit.trace(m, (x,))
    optimized = tracejit.optimize_for_inference(traced)
    jit = _quiet(torch.jit.trace, m, (x,))
    config.output_attentions = True
    y = torch.randn(3, 4)
    with torch.no_grad():
        eager = m(y)
        assert not torch.allclose(jit(y), eager)                  # torch.jit: the trace's branch, silently
        torch.testing.assert_close(_quiet(optimized, y), eager)


def test_onnxruntime_program_checks_config_objects_and_export_refuses_a_stale_one():
    pytest.importorskip("onnxruntime")
    config = DataConfig()
    m = Model(config).eval()
    x = torch.randn(2, 4)
    traced = tracejit.trace(m, (x,))
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    config.scale = 5.0
    y = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(_quiet(program, y), m(y))
    with pytest.raises(tracejit.ExportError, match=r"layer\.config\.scale"):
        tracejit.export_onnx(traced)   # the model would hold the traced scale


def test_save_refuses_a_first_trace_whose_config_changed_since():
    config = PlainConfig()
    m = Model(config).eval()
    x = torch.randn(2, 4)
    traced = tracejit.trace(m, (x,))
    y = torch.randn(3, 4)
    torch.testing.assert_close(_roundtrip(traced)(y), m(y))
    config.output_attentions = True
    torch.testing.assert_close(_quiet(traced, y), m(y))    # the live program traced again
    with pytest.raises(tracejit.SaveError, match=r"layer\.config\.output_attentions.*was False when traced, now True"):
        _roundtrip(traced)   # the file would answer with the traced branch
    config.output_attentions = False
    torch.testing.assert_close(_roundtrip(traced)(y), m(y))


def test_a_type_change_to_an_equal_value_is_seen():
    """``2`` -> ``2.0``: equal, but an int tensor times a float is a float tensor."""
    config = types.SimpleNamespace(scale=2)

    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = config

        def forward(self, x):
            return x * self.config.scale

    m = Scale()
    x = torch.arange(4)
    traced = tracejit.trace(m, (x,))
    config.scale = 2.0
    got, want = _quiet(traced, x), m(x)
    assert got.dtype == want.dtype == torch.float32 and torch.equal(got, want)


def test_a_list_attribute_changed_in_place_is_seen():
    config = types.SimpleNamespace(sizes=[2, 2])

    class Split(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = config

        def forward(self, x):
            return [p.sum() for p in torch.split(x, self.config.sizes)]

    m = Split()
    x = torch.arange(4.0)
    traced = tracejit.trace(m, (x,))
    jit = _quiet(torch.jit.trace, m, (x,))
    config.sizes[:] = [1, 3]
    want = m(x)
    assert not all(torch.equal(a, b) for a, b in zip(jit(x), want))
    assert all(torch.equal(a, b) for a, b in zip(_quiet(traced, x), want))


def test_without_the_original_the_guard_error_names_the_line():
    config = types.SimpleNamespace(output_attentions=False, scale=2.0)
    m = Model(config).eval()
    traced = tracejit.trace(m, (torch.randn(2, 4),))
    traced.drop_original()
    config.output_attentions = True
    with pytest.raises(tracejit.GuardError, match=r"test_config_objects\.py:\d+ `if self\.config\.output_attentions:`"):
        traced(torch.randn(2, 4))


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


@dataclasses.dataclass(slots=True)
class SlotsConfig:
    output_attentions: bool = False
    scale: float = 2.0


def test_a_slots_dataclass_config_is_checked():
    config = SlotsConfig()
    m = Model(config).eval()
    x = torch.randn(2, 4)
    traced = tracejit.trace(m, (x,))
    jit = _quiet(torch.jit.trace, m, (x,))
    config.output_attentions = True
    y = torch.randn(3, 4)
    with torch.no_grad():
        assert not torch.equal(jit(y), m(y))
        torch.testing.assert_close(_quiet(traced, y), m(y), rtol=0, atol=0)


class Chain(torch.nn.Module):
    """Six layers, each with its own config object (one holding a list), checked together per call
    (support/object_checks.ObjectChecks)."""

    def __init__(self):
        super().__init__()
        self.configs = [types.SimpleNamespace(scale=1.0 + k, flip=False, sizes=[2, 2]) for k in range(6)]
        self.layers = torch.nn.ModuleList(Layer(c) for c in self.configs)
        for layer, config in zip(self.layers, self.configs):
            layer.own = config

    def forward(self, x):
        for layer in self.layers:
            x = layer.lin(x) * layer.own.scale
            if layer.own.flip:
                x = -x
            x = torch.cat([p * (i + 1) for i, p in enumerate(x.split(layer.own.sizes, dim=1))], dim=1)
        return x


@pytest.mark.parametrize("backend", ["traced", "onnxruntime"])
@pytest.mark.parametrize("which", [0, 3, 5])
@pytest.mark.parametrize("change", ["scale", "flip", "sizes", "type"])
def test_a_change_to_any_one_of_many_objects_is_seen(backend, which, change):
    if backend == "onnxruntime":
        pytest.importorskip("onnxruntime")
    torch.manual_seed(which)
    m = Chain().eval()
    x = torch.randn(2, 4)
    traced = tracejit.trace(m, (x,))
    program = traced if backend == "traced" else tracejit.optimize_for_inference(traced, backend=backend)
    config = m.configs[which]
    tol = {} if backend == "traced" else dict(rtol=1e-4, atol=1e-4)   # onnxruntime's kernels: reassociation
    y = torch.randn(3, 4)
    with torch.no_grad():
        before = m(y)
        torch.testing.assert_close(_quiet(program, y), before, **tol)
        if change == "sizes":
            config.sizes[:] = [1, 3]            # in place: the same list object
        elif change == "type":
            config.scale = int(config.scale)    # equal, another type: a retrace (the guards compare types)
        else:
            setattr(config, change, {"scale": 7.0, "flip": True}[change])
        want = m(y)
        assert change == "type" or not torch.allclose(want, before)   # the change moves eager's answer
        torch.testing.assert_close(_quiet(program, y), want, **tol)
        config.sizes[:], config.scale, config.flip = [2, 2], 1.0 + which, False   # back: the first trace again
        torch.testing.assert_close(_quiet(program, y), before, **tol)
