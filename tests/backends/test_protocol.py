"""Backends behind one protocol (tracejit/backends): each backend built by name answers as eager on new
inputs, onnxruntime and OpenVINO keep every specialization of a retraced program, one fallback policy,
and a new backend is one module (docs/DESIGN.md, "Adding a backend")."""
from __future__ import annotations

import importlib.util
import io
import sys
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.backends import BACKENDS, build, register
from tracejit.backends import fallback, protocol

HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
EXPORTED = ["onnxruntime"] + (["openvino"] if HAS_OPENVINO else [])


class WidthBranch(nn.Module):
    """Another branch for wide inputs: a trace at width 16 freezes the narrow one behind a size guard."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        if x.shape[-1] > 32:
            return torch.relu(y) * 2
        return torch.sigmoid(y) - 1


class ThreeWidths(nn.Module):
    def forward(self, x):
        if x.shape[-1] > 64:
            return x * 3
        if x.shape[-1] > 32:
            return x + 1
        return x - 1


def _image(width, batch=1, seed=0):
    return torch.randn(batch, 3, 8, width, generator=torch.Generator().manual_seed(seed))


def _retraced(module, *widths):
    """``module`` traced at the first width, then called at each other one (a retrace each)."""
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        traced = tracejit.trace(module, _image(widths[0]))
        for width in widths[1:]:
            traced(_image(width))
    assert len(traced.specializations) == len(widths)
    return traced


@pytest.mark.parametrize("name", ["program", "torch", *EXPORTED])
def test_each_backend_through_the_protocol_answers_as_eager_on_new_inputs(name):
    module = WidthBranch().eval()
    with torch.no_grad():
        traced = tracejit.trace(module, _image(16))
        program = build(name, traced)
        assert program.backend == name
        for batch, width in [(1, 16), (3, 20), (2, 9)]:
            x = _image(width, batch, seed=batch)
            torch.testing.assert_close(program(x), module(x), rtol=1e-4, atol=1e-5)
        assert not torch.equal(program(_image(20)), program(_image(20, seed=7)))   # the inputs move the output


@pytest.mark.parametrize("name", EXPORTED)
def test_exported_backends_keep_every_specialization_of_a_retraced_program(name):
    """Traced at width 16, retraced at 48: onnxruntime / OpenVINO answer both branches, at widths the
    traces never saw, where one exported model (and torch.jit.trace) would answer the traced branch."""
    module = WidthBranch().eval()
    traced = _retraced(module, 16, 48)
    with torch.no_grad():
        program = tracejit.optimize_for_inference(traced, backend=name)
        assert len(program.specializations) == 2
        jit = torch.jit.trace(module, _image(16), check_trace=False)
        for batch, width in [(1, 48), (2, 40), (1, 16), (3, 24), (2, 64)]:
            x = _image(width, batch, seed=width)
            expected = module(x)
            torch.testing.assert_close(program(x), expected, rtol=1e-4, atol=1e-5)
            if width > 32:   # torch.jit's trace keeps the narrow branch: the width moves eager's answer
                assert not torch.allclose(jit(x), expected, atol=1e-3)


@pytest.mark.parametrize("name", ["torch", *EXPORTED])
def test_a_call_no_specialization_fits_goes_to_the_live_object_else_raises_what_each_required(name):
    """The optimized program holds the two traces; a third width takes a branch neither holds. The live
    traced object answers it (it traces again: eager's answer, every call); once its original is dropped,
    and for a program built from a loaded one, the GuardError listing what each specialization required."""
    module = ThreeWidths()
    traced = _retraced(module, 16, 48)
    buf = io.BytesIO()
    tracejit.save(traced, buf)   # the two traces
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracejit.TracerWarning)   # the choice checks every guard: no warning
        program = tracejit.optimize_for_inference(traced, backend=name)
        from_loaded = tracejit.optimize_for_inference(tracejit.load(io.BytesIO(buf.getvalue())), backend=name)
    torch.testing.assert_close(program(_image(40)), module(_image(40)))
    torch.testing.assert_close(program(_image(10)), module(_image(10)))
    wide = _image(100)
    assert not torch.allclose(module(wide), wide + 1)   # neither kept branch answers it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)   # the live object's retrace says so
        for x in (wide, _image(100, seed=100), _image(120)):   # again and again: eager's answer each time
            torch.testing.assert_close(program(x), module(x))
    assert len(traced.specializations) == 3
    traced.drop_original()
    for p in (program, from_loaded):
        with pytest.raises(tracejit.GuardError, match=r"no specialization fits these inputs \(\d tried"):
            p(_image(200))


@pytest.mark.parametrize("name", EXPORTED)
def test_the_choice_leaves_the_callers_tensors_and_the_module_as_they_were(name):
    class CountsCalls(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.tensor(2.0))

        def forward(self, x):
            if x.shape[-1] > 32:
                return x * self.scale
            return x / self.scale

    module = CountsCalls().eval()
    traced = _retraced(module, 16, 48)
    program = tracejit.optimize_for_inference(traced, backend=name)
    x = _image(40)
    before = x.clone()
    torch.testing.assert_close(program(x), module(x))
    assert torch.equal(x, before) and module.scale.item() == 2.0


def test_unknown_backend_and_a_module_that_breaks_the_protocol_are_refused(tmp_path, monkeypatch):
    traced = tracejit.trace(lambda x: x + 1, torch.ones(2))
    with pytest.raises(ValueError, match=r"unknown backend 'tvm'; expected one of \('torch', 'onnxruntime'"):
        build("tvm", traced)
    (tmp_path / "no_name_backend.py").write_text("def build(traced):\n    return traced\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(BACKENDS, "noname", "no_name_backend")
    with pytest.raises(TypeError, match=r"must define NAME = 'noname' and build\(traced, \*\*options\)"):
        build("noname", traced)


TOY_BACKEND = '''
"""A toy backend: the plain traced program under no_grad, counting its calls."""
import torch

NAME = "toy"


class ToyProgram:
    backend = NAME

    def __init__(self, traced):
        self.traced, self.calls = traced, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        with torch.no_grad():
            return self.traced(*args, **kwargs)


def build(traced, **options):
    return ToyProgram(traced)
'''


def test_adding_a_backend_is_one_module(tmp_path, monkeypatch):
    """The recipe of docs/DESIGN.md: write a module with NAME and build(), register it, build it."""
    (tmp_path / "toy_backend.py").write_text(TOY_BACKEND)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(protocol, "BACKENDS", dict(BACKENDS))
    register("toy", "toy_backend")
    traced = tracejit.trace(lambda x, y: x * y + 1, (torch.ones(2), torch.ones(2)))
    program = build("toy", traced)
    x, y = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(program(x, y), x * y + 1)
    assert program.backend == "toy" and program.calls == 1 and "toy_backend" in sys.modules
    with pytest.raises(ValueError, match="a backend name is a non-empty string"):
        register("", "toy_backend")


def test_one_fallback_policy_an_unlisted_backend_always_checks_for_nan():
    """The NaN-sensitive op list is per backend; a backend nobody listed gets the check (default-deny)."""
    traced = tracejit.trace(lambda x: x * 2, torch.ones(2))
    fast, safe = (lambda *a: "fast"), (lambda *a: "safe")
    assert fallback.with_finite_check("onnxruntime", traced.graph, safe, fast) is fast   # no listed op
    checked = fallback.with_finite_check("toy", traced.graph, safe, fast)
    assert checked(torch.ones(2)) == "fast" and checked(torch.tensor([1.0, float("nan")])) == "safe"


@pytest.mark.parametrize("name", ["torch", *EXPORTED])
def test_a_live_object_in_another_mode_does_not_answer_for_the_optimized_program(name):
    """The optimized program is an eval-mode program: where the live object it was made from was switched
    to training mode, a call no specialization fits raises the GuardError rather than run a training trace."""
    module = ThreeWidths()
    traced = _retraced(module, 16, 48)
    program = tracejit.optimize_for_inference(traced, backend=name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        for mode in ("eval", "train", "eval"):
            getattr(traced, mode)()
            if mode == "train":
                with pytest.raises(tracejit.GuardError, match=r"no specialization fits these inputs \(2 tried"):
                    program(_image(100))
            else:
                torch.testing.assert_close(program(_image(100)), module(_image(100)))
