"""Module-level globals read while tracing are guarded (trace/global_reads.py): a later change gives eager's answer.

Each test changes a global of this module after tracing and compares tracejit with eager, and torch.jit.trace
(which keeps the traced value silently) to show the change moves the answer.
"""
from __future__ import annotations

import io
import os
import sys
import warnings

import pytest
import torch

import tracejit

import global_settings

SCALE = 2.0
USE_BIAS = True
SHAPE = (2, 3)
CONFIG = {"eps": 0.5, "mode": "add"}
STEP = 1


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def scaled(x):
    return x * SCALE


def branchy(x):
    return x + 1 if USE_BIAS else x - 1


def reshaped(x):
    return x.reshape(SHAPE) + CONFIG["eps"] * (2 if CONFIG["mode"] == "add" else -3)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.SCALE = 10.0   # an attribute sharing a global's name is not the global

    def forward(self, x):
        y = self.lin(x) * SCALE
        return y.relu() if USE_BIAS else y.tanh() * self.SCALE


def _set(monkeypatch, **values):
    module = sys.modules[__name__]
    for name, value in values.items():
        monkeypatch.setattr(module, name, value)


def _roundtrip(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


@pytest.mark.parametrize("fn,change", [
    (scaled, {"SCALE": 3.0}), (scaled, {"SCALE": 2}),                   # an int promotes an int tensor otherwise
    (branchy, {"USE_BIAS": False}),
    (reshaped, {"SHAPE": (3, 2)}), (reshaped, {"CONFIG": {"eps": 0.25, "mode": "add"}}),
    (reshaped, {"CONFIG": {"eps": 0.5, "mode": "sub"}}),
], ids=["float", "float_to_int", "flag", "tuple", "dict_value", "dict_string"])
def test_a_changed_global_gives_eagers_answer(monkeypatch, fn, change):
    x = torch.arange(6.0) - 2 if fn is not scaled else torch.arange(6)
    traced = tracejit.trace(fn, (x,))
    jitted = _quiet(torch.jit.trace, fn, (x,))
    assert torch.equal(traced(x), fn(x))
    _set(monkeypatch, **change)
    want = fn(x)
    assert not (torch.equal(jitted(x), want) and jitted(x).dtype == want.dtype)   # the change moves the answer
    with pytest.warns(tracejit.TracerWarning, match="global `"):
        got = traced(x)
    assert torch.equal(got, want) and got.dtype == want.dtype
    assert len(traced.specializations) == 2
    x2 = torch.arange(6.0) * 3 if fn is not scaled else torch.arange(6) * 3   # new values, the new specialization
    assert torch.equal(traced(x2), fn(x2))


def test_module_forward_globals_and_optimized_program(monkeypatch):
    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(4, 6)
    traced = tracejit.trace(net, (x,))
    kinds = {n.attrs.get("name") for n in traced.graph.nodes if n.attrs.get("kind") == "global"}
    assert kinds == {"SCALE", "USE_BIAS"}        # not `self.SCALE`, not torch / F / classes
    optimized = tracejit.optimize_for_inference(traced)
    jitted = _quiet(torch.jit.trace, net, (x,))
    _set(monkeypatch, USE_BIAS=False, SCALE=0.5)
    x2 = torch.randn(3, 6)
    with torch.no_grad():
        want = net(x2)
        assert not torch.allclose(jitted(x2), want)
        assert torch.allclose(_quiet(traced, x2), want)
        assert torch.allclose(_quiet(optimized, x2), want, atol=1e-6)


def test_opt_out_keeps_the_traced_value_as_torch_jit_does(monkeypatch):
    x = torch.arange(6.0)
    traced = tracejit.trace(scaled, (x,), allow_frozen_python_state=True)
    jitted = _quiet(torch.jit.trace, scaled, (x,))
    assert not [n for n in traced.graph.nodes if n.op == "tracejit::guard"]
    _set(monkeypatch, SCALE=5.0)
    assert torch.equal(traced(x), x * 2.0) and torch.equal(jitted(x), x * 2.0)


def test_a_file_holds_the_globals_of_saving(monkeypatch):
    x = torch.arange(6.0)
    traced = tracejit.trace(scaled, (x,))
    loaded = _roundtrip(traced)
    assert torch.equal(loaded(x), scaled(x))
    _set(monkeypatch, SCALE=3.0)
    assert torch.equal(loaded(x), x * 2.0)   # a file is a snapshot: it keeps no check of Python globals
    assert torch.equal(_quiet(traced, x), scaled(x))   # the live program traced again
    with pytest.raises(tracejit.SaveError, match=r"global `SCALE`.*was 2\.0 when traced, now 3\.0"):
        _roundtrip(traced)   # its first trace holds 2.0: refused, not saved with a stale value
    _set(monkeypatch, SCALE=2.0)
    loaded = _roundtrip(traced)   # the specialization for 3.0 is left out: the file answers with 2.0
    assert torch.equal(loaded(x * 4), scaled(x * 4))
    assert len(loaded.specializations) == 1


def test_onnx_backends_check_globals_before_each_run(monkeypatch):
    pytest.importorskip("onnxruntime")
    x = torch.arange(6.0) - 2
    traced = tracejit.trace(branchy, (x,))
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    assert torch.equal(program(x), branchy(x))
    _set(monkeypatch, USE_BIAS=False)
    assert torch.equal(_quiet(program, x), branchy(x))
    with pytest.raises(tracejit.ExportError, match=r"global `USE_BIAS`.*now False"):
        tracejit.export_onnx(traced)   # the file would hold the traced branch


def test_what_is_not_guarded():
    """Code run with a globals dict of no imported module is not guarded (documented); only the plain data a
    function loads as a global is (not ``torch``, not the function itself)."""
    table = list(range(1000))
    g = {"__name__": "not_a_module", "torch": torch, "table": table}
    exec("def f(x):\n    return torch.relu(x) + table[3]\n", g)
    traced = tracejit.trace(g["f"], (torch.randn(3),))
    assert not [n for n in traced.graph.nodes if n.attrs.get("kind") == "global"]
    traced = tracejit.trace(scaled, (torch.randn(3),))
    assert [n.attrs["name"] for n in traced.graph.nodes if n.attrs.get("kind") == "global"] == ["SCALE"]


def from_settings(x):
    y = x * global_settings.SCALE + global_settings.Defaults.EPS
    return y.reshape(global_settings.SIZES) if global_settings.Defaults.MODE == "add" else -y


@pytest.mark.parametrize("change", [
    lambda: setattr(global_settings, "SCALE", 4.0),
    lambda: global_settings.SIZES.reverse(),                     # in place: the same list, other items
    lambda: setattr(global_settings.Defaults, "MODE", "sub"),
], ids=["module_attribute", "module_list_in_place", "class_attribute"])
def test_attributes_of_a_settings_module_are_guarded(monkeypatch, change):
    monkeypatch.setattr(global_settings, "SCALE", 2.0)
    monkeypatch.setattr(global_settings, "SIZES", [2, 3])
    monkeypatch.setattr(global_settings.Defaults, "MODE", "add")
    x = torch.arange(6.0)
    traced = tracejit.trace(from_settings, (x,))
    jitted = _quiet(torch.jit.trace, from_settings, (x,))
    names = sorted(n.attrs["name"] for n in traced.graph.nodes if n.attrs.get("kind") == "global")
    assert names == ["EPS", "MODE", "SCALE", "SIZES"]
    change()
    want = from_settings(x)
    assert not (jitted(x).shape == want.shape and torch.equal(jitted(x), want))
    got = _quiet(traced, x)
    assert got.shape == want.shape and torch.equal(got, want)
    assert len(traced.specializations) == 2


def env_scaled(x):
    y = x * float(os.environ.get("TRACEJIT_TEST_SCALE", "1"))
    if "TRACEJIT_TEST_SHIFT" in os.environ:
        y = y + 10
    return y


@pytest.mark.parametrize("name,value", [("TRACEJIT_TEST_SCALE", "3"), ("TRACEJIT_TEST_SHIFT", "")],
                         ids=["value", "presence"])
def test_environment_variables_read_are_guarded(monkeypatch, name, value):
    monkeypatch.setenv("TRACEJIT_TEST_SCALE", "2")
    monkeypatch.delenv("TRACEJIT_TEST_SHIFT", raising=False)
    x = torch.arange(4.0)
    traced = tracejit.trace(env_scaled, (x,))
    jitted = _quiet(torch.jit.trace, env_scaled, (x,))
    loaded = _roundtrip(traced)
    monkeypatch.setenv(name, value)
    want = env_scaled(x)
    assert not torch.equal(jitted(x), want)
    assert torch.equal(_quiet(traced, x), want)
    assert torch.equal(loaded(x), x * 2)   # a file is a snapshot of the environment of saving
    with pytest.raises(tracejit.SaveError, match=f"environment variable '{name}'"):
        _roundtrip(traced)


MEAN = torch.tensor([0.5, 0.25, 0.125])   # a module-level normalisation constant (hunt25 #100, hunt26)


def normalised(x):
    return x - MEAN


class Centre(torch.nn.Module):
    def forward(self, x):
        return x * 2 - MEAN


class Normalise(torch.nn.Module):
    """The global is read by a submodule: the root's program holds the check."""

    def __init__(self):
        super().__init__()
        self.inner = Centre()

    def forward(self, x):
        return self.inner(x).relu()


@pytest.mark.parametrize("make", [lambda: normalised, lambda: Normalise().eval()], ids=["function", "submodule"])
def test_a_rebound_global_tensor_traces_again(monkeypatch, make):
    """``MEAN = MEAN.to(...)`` / a new tensor bound to the name after the trace: eager reads the new tensor; the
    program captured the old one and returned the old answer silently before (torch.jit.trace still does). Now
    a tensor global is checked by its identity, in memory: the live and optimized programs trace again, one whose
    original was dropped raises GuardError naming the line. A file keeps no check of Python globals (by design:
    a file is a snapshot, loaded where this module need not exist), so the loaded program keeps the tensor saved
    and prints the same graph and code as the traced one."""
    eager = make()
    x, new_x = torch.randn(3), torch.randn(3)
    traced = _quiet(tracejit.trace, eager, (x,))
    optimized = tracejit.optimize_for_inference(_quiet(tracejit.trace, eager, (x,)))
    dropped = _quiet(tracejit.trace, eager, (x,))
    dropped.drop_original()
    reference = _quiet(torch.jit.trace, eager, (x,), check_trace=False)
    loaded = _roundtrip(traced)
    assert str(loaded.graph) == str(traced.graph)   # the check is beside the graph, not in it
    before = eager(new_x)
    monkeypatch.setitem(globals(), "MEAN", MEAN.to(torch.float64) * 4)
    after = eager(new_x)
    assert not torch.equal(after, before) and after.dtype == torch.float64   # eager's answer moved
    assert torch.equal(reference(new_x), before)   # torch.jit.trace: the old tensor, silently
    torch.testing.assert_close(_quiet(traced, new_x), after)
    torch.testing.assert_close(_quiet(optimized, new_x), after)
    with pytest.raises(tracejit.GuardError, match=r"test_global_reads\.py:\d+ `.*MEAN.*`: global `MEAN`"):
        dropped(new_x)
    torch.testing.assert_close(loaded(new_x), before)   # the file's snapshot
    for stale in (dropped, traced):   # the first trace holds the old tensor: save refuses it, as for any global
        with pytest.raises(tracejit.SaveError, match="changed since .*global `MEAN`"):
            _roundtrip(stale)
    MEAN.mul_(2)   # in place: the captured object itself (the new binding now), no retrace needed
    torch.testing.assert_close(_quiet(traced, new_x), eager(new_x))
    torch.testing.assert_close(_quiet(optimized, new_x), eager(new_x))


def test_a_tensor_global_allowed_frozen_is_not_checked(monkeypatch):
    """``allow_frozen_python_state=True``: the caller accepts the captured tensor whatever the name is bound to."""
    x = torch.randn(3)
    traced = _quiet(tracejit.trace, normalised, (x,), allow_frozen_python_state=True)
    before = normalised(x)
    monkeypatch.setitem(globals(), "MEAN", torch.zeros(3))
    assert torch.equal(traced(x), before)
