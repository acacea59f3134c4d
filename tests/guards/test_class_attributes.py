"""Class attributes and code without a file, changed after the trace (hunt21).

``self.EPS`` / ``B.EPS`` where the value lives on the class (or a base class), and globals of code run by
``exec`` (a function compiled from text, ``<stdin>``, a notebook cell): eager reads them again at every call;
torch.jit.trace's program (and tracejit's before) kept the traced value silently. Now each is a ``global`` guard
(trace/global_reads.py): the live program traces again, a program without its original raises GuardError.
"""
from __future__ import annotations

import sys
import types
import warnings

import pytest
import torch

import tracejit


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


class Base(torch.nn.Module):
    EPS = 1.0

    def forward(self, x):
        return x + self.EPS


class Child(Base):
    pass


class ReadsChild(torch.nn.Module):
    def forward(self, x):
        return x * Child.EPS


class Defaults:
    eps = 1.0


class HoldsDefaults(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Defaults()

    def forward(self, x):
        return x - self.cfg.eps


CASES = {
    "own_class": (Base, lambda m: setattr(Base, "EPS", 2.0)),
    "base_class": (Child, lambda m: setattr(Base, "EPS", 3.0)),
    "shadowed_on_subclass": (Child, lambda m: setattr(Child, "EPS", 4.0)),
    "shadowed_on_instance": (Child, lambda m: setattr(m, "EPS", 5.0)),
    "global_class_inherited": (ReadsChild, lambda m: setattr(Base, "EPS", 6.0)),
    "global_class_shadowed": (ReadsChild, lambda m: setattr(Child, "EPS", 7.0)),
    "config_class_attr": (HoldsDefaults, lambda m: setattr(Defaults, "eps", 8.0)),
    "config_instance_shadows": (HoldsDefaults, lambda m: setattr(m.cfg, "eps", 9.0)),
}


@pytest.fixture
def restore():
    yield
    Base.EPS, Defaults.eps = 1.0, 1.0
    for cls, name in ((Child, "EPS"),):
        if name in vars(cls):
            delattr(cls, name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_class_attribute_changed_after_the_trace_gives_eager_s_answer(case, restore):
    cls, change = CASES[case]
    m = cls()
    x = torch.randn(3)
    traced = tracejit.trace(m, (x,))
    jit = _quiet(torch.jit.trace, m, (x,))
    change(m)
    y = torch.randn(4)
    want = m(y)
    assert not torch.equal(jit(y), want)                 # torch.jit: the traced value, silently
    assert torch.equal(_quiet(traced, y), want)
    with pytest.raises(tracejit.GuardError, match=r"test_class_attributes\.py:\d+"):
        _fresh_without_original(cls, change)(y)


def _fresh_without_original(cls, change):
    """A program traced before the change, its original dropped: GuardError naming the line."""
    Base.EPS, Defaults.eps = 1.0, 1.0
    if "EPS" in vars(Child):
        del Child.EPS
    m = cls()
    traced = tracejit.trace(m, (torch.randn(3),))
    traced.drop_original()
    change(m)
    return traced


def test_an_unrelated_class_attribute_is_not_guarded(restore):
    traced = tracejit.trace(Base(), (torch.randn(3),))
    kinds = [(n.attrs.get("owner"), n.attrs.get("name")) for n in traced.graph.nodes if n.attrs.get("kind") == "global"]
    assert all(name == "EPS" for _, name in kinds), kinds   # not dump_patches, call_super_init... (torch's classes)


@pytest.mark.parametrize("filename", ["<string>", "<stdin>", "/nowhere/cell.py"])
def test_globals_of_code_run_by_exec_are_guarded(filename):
    g = {"K": 2.0, "__name__": "tj_hunt21_exec"}
    exec(compile("def f(x):\n    return x * K\n", filename, "exec"), g)
    f = g["f"]
    x = torch.randn(3)
    traced = tracejit.trace(f, (x,))
    jit = _quiet(torch.jit.trace, f, (x,))
    g["K"] = 3.0
    assert not torch.equal(jit(x), f(x))
    assert torch.equal(_quiet(traced, x), f(x))


def test_code_from_text_in_a_module_s_namespace_is_guarded():
    mod = sys.modules["tj_hunt21_textmod"] = types.ModuleType("tj_hunt21_textmod")
    try:
        mod.K = 2.0
        exec(compile("def f(x):\n    return x * K\n", "<stdin>", "exec"), mod.__dict__)
        x = torch.randn(3)
        traced = tracejit.trace(mod.f, (x,))
        mod.K = -1.0
        assert torch.equal(_quiet(traced, x), mod.f(x))
    finally:
        del sys.modules["tj_hunt21_textmod"]


GLOBAL_CFG = types.SimpleNamespace(shift=1.0)


def shifted(x):
    return x + GLOBAL_CFG.shift


def test_onnx_programs_check_objects_held_by_globals():
    pytest.importorskip("onnxruntime")
    x = torch.randn(3)
    traced = tracejit.trace(shifted, (x,))
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    try:
        GLOBAL_CFG.shift = -2.0
        torch.testing.assert_close(_quiet(program, x), shifted(x))
        with pytest.raises(tracejit.ExportError, match="GLOBAL_CFG.shift"):
            tracejit.export_onnx(traced)
    finally:
        GLOBAL_CFG.shift = 1.0


class OwnAttributes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1.0
        self.cfg = {"k": 2.0}
        self.sizes = [2, 2]
        self.flag = False

    def forward(self, x):
        y = (x + self.eps) * self.cfg["k"]
        y = torch.cat(torch.split(y, self.sizes, 1)[::-1], 1)
        return y * 2 if self.flag else y


OWN_CHANGES = {
    "float": lambda m: setattr(m, "eps", 5.0),
    "dict_item": lambda m: m.cfg.update(k=3.0),
    "list_in_place": lambda m: m.sizes.__setitem__(slice(None), [1, 3]),
    "flag": lambda m: setattr(m, "flag", True),
}


@pytest.mark.parametrize("change", sorted(OWN_CHANGES))
def test_a_user_module_s_own_attribute_changed_on_the_original_gives_eager_s_answer(change):
    m = OwnAttributes()
    x = torch.randn(2, 4)
    traced = tracejit.trace(m, (x,))
    jit = _quiet(torch.jit.trace, m, (x,))
    OWN_CHANGES[change](m)
    y = torch.randn(3, 4)
    assert not torch.equal(jit(y), m(y))
    assert torch.equal(_quiet(traced, y), m(y))


class CachesInEager(torch.nn.Module):
    """timm's LeViT: a dict attribute forward fills on eager calls only (traced, it computes the value each time)."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(4))
        self.cache = {}
        self.scale = 2.0

    def forward(self, x):
        if tracejit.is_tracing():
            b = self.bias * 1
        else:
            key = str(x.device)
            if key not in self.cache:
                self.cache[key] = self.bias * 1
            b = self.cache[key]
        return (x + b) * self.scale


def test_a_cache_the_module_fills_itself_is_not_a_guard_but_its_settings_are():
    m = CachesInEager()
    x = torch.randn(2, 4)
    traced = tracejit.trace(m, (x,))   # check_trace runs eager, which fills the cache: the check must hold
    y = torch.randn(3, 4)
    assert torch.equal(traced(y), m(y)) and m.cache
    assert len(traced.specializations) == 1
    m.scale = 3.0   # a setting read by name, never written by forward: still seen
    assert torch.equal(_quiet(traced, y), m(y))
