"""Seeding inside forward is recorded as the program's own RNG (issue #20 item 2; trace/rng_record.py).

``torch.manual_seed(k)`` and a ``torch.Generator()`` made (and seeded) inside forward replay at the same point
on every call: each pattern's random ops give eager's exact values on new inputs (other sizes, other values),
live, after save + load and after ``optimize_for_inference``, and the caller's global generator is left exactly
as eager leaves it (a draw after the call is compared). Each pattern first shows that it matters: a second
call of torch.jit.trace's program draws other numbers than eager (tests/compat/test_rng_compat.py has more).
"""
from __future__ import annotations

import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracejit
from trace_testlib import marker_lines, roundtrip

LINE = marker_lines(inspect.getsourcefile(inspect.currentframe()))
FILE = inspect.getsourcefile(inspect.currentframe())


def global_noise(x):                      # diffusion samplers: reproducible noise per call
    torch.manual_seed(1234)
    return x + torch.randn(x.shape) * 0.1 + torch.rand(x.shape)


def own_generator(x):
    g = torch.Generator().manual_seed(7)
    return x + torch.randn(x.shape, generator=g) + torch.randint(0, 5, x.shape, generator=g)


def generator_seeded_later(x):            # made, drawn from unseeded (a fixed default seed), then seeded
    g = torch.Generator()
    a = torch.rand(x.shape, generator=g)
    g.manual_seed(x.size(0))
    return x * a + torch.normal(torch.zeros_like(x), 1.0, generator=g)


def train_dropout(x):
    torch.manual_seed(3)
    return F.dropout(x, 0.5, training=True) + torch.bernoulli(torch.full_like(x, 0.3))


def unused_draw(x):                       # a draw nobody reads still moves the stream (DCE must keep it)
    torch.manual_seed(5)
    torch.rand(7)
    return x + torch.rand(x.shape)


def draws_after_seed(x):                  # the caller's generator after the call: as eager leaves it
    y = x + torch.rand(x.shape)           # before the seed: the caller's stream
    torch.manual_seed(9)
    return y + torch.randint(0, 9, (x.size(0),))


class Child(nn.Module):
    def forward(self, x, g):
        return x + torch.rand(x.shape, generator=g) + torch.randn(x.shape)


class SeedingParent(nn.Module):           # seeded in the parent, drawn in a submodule (given the generator)
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.child = Child()

    def forward(self, x):
        torch.random.manual_seed(4)
        g = torch.Generator().manual_seed(2)
        return self.child(self.lin(x), g) * 2


def tensor_seed(x, seed):
    torch.manual_seed(int(seed))  # @tensor_seed
    return x + torch.rand(x.shape)


PATTERNS = [
    ("global_noise", global_noise, (torch.randn(3),), (torch.randn(6),)),
    ("own_generator", own_generator, (torch.randn(2, 3),), (torch.randn(4, 5),)),
    ("generator_seeded_later", generator_seeded_later, (torch.randn(3),), (torch.randn(3) * 4,)),
    ("train_dropout", train_dropout, (torch.randn(8),), (torch.randn(16),)),
    ("unused_draw", unused_draw, (torch.randn(3),), (torch.randn(5),)),
    ("draws_after_seed", draws_after_seed, (torch.randn(3),), (torch.randn(4),)),
    ("seeding_parent", SeedingParent(), (torch.randn(2, 4),), (torch.randn(3, 4),)),
]


def trace(fn, example, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(fn, example, **kwargs)


def call(fn, args):
    """The output and the caller's next global draw, from a fixed caller state."""
    torch.manual_seed(99)
    out = fn(*[a.clone() for a in args])
    return out, torch.rand(4)


def exact(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("name,fn,example,new", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_the_pattern_matters(name, fn, example, new):
    """torch.jit.trace's program does not reseed: from the same caller state it draws other numbers than eager
    (or leaves the caller's generator elsewhere), or it cannot trace the pattern at all."""
    torch.manual_seed(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jit = torch.jit.trace(fn, example, check_trace=False)
        stale = call(jit, new)
    except Exception:   # noqa: BLE001  (torch.jit.trace fails on the pattern: it matters as well)
        return
    assert not exact(stale, call(fn, new)), name


@pytest.mark.parametrize("name,fn,example,new", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_live_and_loaded_give_eagers_numbers_and_leave_the_generator_as_eager(name, fn, example, new):
    traced = trace(fn, example)
    loaded = roundtrip(traced)
    for args in (example, new):
        want = call(fn, args)
        assert exact(call(traced, args), want), name
        assert exact(call(traced, args), want), name   # the second call reseeds as eager's does
    assert exact(call(loaded, example), call(fn, example)), name


@pytest.mark.parametrize("name,fn,example,new", [p for p in PATTERNS if p[0] != "train_dropout"],
                         ids=[p[0] for p in PATTERNS if p[0] != "train_dropout"])
def test_optimize_for_inference_keeps_the_seeds(name, fn, example, new):
    if isinstance(fn, nn.Module):
        fn.eval()
    opt = tracejit.optimize_for_inference(trace(fn, example))
    for args in (example, new):
        got, want = call(opt, args), call(fn, args)
        assert torch.allclose(got[0], want[0], atol=1e-5) and torch.equal(got[1], want[1]), name


def test_the_program_names_the_seed_and_the_file_holds_only_data():
    traced = trace(own_generator, (torch.randn(2, 3),))
    text = str(traced.graph)
    assert "tracejit::new_generator" in text and "tracejit::seed_generator[seed=7]" in text
    assert "torch.Generator('cpu')" in traced.code and ".manual_seed(7)" in traced.code
    assert "tracejit::manual_seed[seed=1234]" in str(trace(global_noise, (torch.randn(3),)).graph)


def test_an_unused_draw_after_a_seed_is_kept():
    assert str(trace(unused_draw, (torch.randn(3),)).graph).count("aten::rand") == 2


def test_a_seed_read_from_a_tensor_is_guarded():
    x = torch.randn(4)
    traced = trace(tensor_seed, (x, torch.tensor(3)))
    loaded = roundtrip(traced)
    assert not torch.equal(tensor_seed(x, torch.tensor(3)), tensor_seed(x, torch.tensor(8)))
    assert exact(call(traced, (x, torch.tensor(8))), call(tensor_seed, (x, torch.tensor(8))))
    with pytest.raises(tracejit.GuardError) as err:
        loaded(x, torch.tensor(8))
    assert err.value.source is not None and err.value.source.lineno == LINE("tensor_seed")


def test_state_methods_of_a_generator_made_in_forward_are_refused():
    def reads_state(x):
        g = torch.Generator().manual_seed(3)
        return x + g.get_state()[:4].float()  # @reads_state

    with pytest.raises(tracejit.TraceError) as err:
        trace(reads_state, (torch.randn(4),))
    assert f"{FILE}:{LINE('reads_state')}:" in str(err.value) and "get_state" in str(err.value)


def test_onnx_refuses_a_seeded_program_naming_the_line():
    pytest.importorskip("onnxscript")
    traced = trace(global_noise, (torch.randn(3),))
    with pytest.raises(tracejit.ExportError, match="cannot draw torch's stream") as err:
        tracejit.export_onnx(traced)
    assert "test_recorded_rng.py" in str(err.value)


def test_the_onnxruntime_backend_refuses_a_seeded_program_saying_why_and_what_to_do():
    """onnxruntime cannot replay torch's generator stream (OpenVINO's program is built by the same export):
    refused at the seed's line, with the way out; backend='auto' keeps a torch candidate, with eager's numbers."""
    pytest.importorskip("onnxruntime")
    traced = trace(global_noise, (torch.randn(3),))
    with pytest.raises(tracejit.ExportError) as err:
        tracejit.optimize_for_inference(traced, backend="onnxruntime")
    text = str(err.value)
    assert "cannot draw torch's stream" in text and "pass it in as an input" in text and "backend='torch'" in text
    assert f"{FILE}:" in text
    auto = tracejit.optimize_for_inference(traced, backend="auto")
    assert auto.backend not in ("onnxruntime", "openvino")
    x = torch.randn(5)
    assert exact(call(auto, (x,)), call(global_noise, (x,)))


def test_export_refuses_a_draw_from_a_generator_made_outside_forward():
    """The traced program draws on from the captured generator (eager's numbers); an ONNX model would draw its own
    (it used to export silently, ignoring the generator)."""
    pytest.importorskip("onnxscript")
    g = torch.Generator().manual_seed(0)

    def outside(x):
        return x + torch.rand(x.shape, generator=g)  # @outside_generator

    traced = trace(outside, (torch.randn(3),))
    with pytest.raises(tracejit.ExportError, match="made outside forward") as err:
        tracejit.export_onnx(traced)
    assert f"{FILE}:{LINE('outside_generator')}" in str(err.value)


def test_a_generator_made_outside_forward_is_still_captured():
    g = torch.Generator().manual_seed(0)

    def outside(x):
        return x + torch.rand(x.shape, generator=g)

    traced = trace(outside, (torch.randn(3),))
    assert "new_generator" not in str(traced.graph)
    assert isinstance(g, torch.Generator) and type(g) is torch.Generator


def test_the_stand_in_is_a_generator_class_while_tracing():
    seen = {}

    def body(x):
        g = torch.Generator()
        seen["isinstance"] = isinstance(g, torch.Generator) and issubclass(type(g), torch.Generator)
        seen["default"] = torch.Generator.__name__
        return x + torch.rand(x.shape, generator=g.manual_seed(1))

    trace(body, (torch.randn(3),), allow_frozen_python_state=True)   # `seen`: a spy
    assert seen == {"isinstance": True, "default": "Generator"}
    assert torch.Generator is torch._C.Generator
