"""Shapes other than the traced one, called again, get an onnxruntime session pinned to them
(backends/pinned_shapes.py): eager's answer before and after the session opens, from any number of threads,
within the caps on how many sessions a program keeps."""
from __future__ import annotations

import threading
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.backends import pinned_shapes
from tracejit.backends.onnxruntime import _run_of

pytest.importorskip("onnxruntime")


class Block(nn.Module):
    """A transformer-style block whose reshapes read the sequence length (folded only in a pinned model)."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.heads, self.qkv, self.out, self.norm = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), nn.LayerNorm(dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(b, s, d)
        return self.norm(x + self.out(y))


def _program(model, example):
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        return tracejit.optimize_for_inference(tracejit.trace(model, (example,)), backend="onnxruntime")


def _x(batch, seq, seed=0):
    return torch.randn(batch, seq, 32, generator=torch.Generator().manual_seed(seed))


def test_a_shape_called_again_gets_its_own_session_and_eager_answers():
    model = Block().eval()
    program = _program(model, _x(1, 8))
    new = _x(1, 12)
    key = (new.shape,)
    first = program(new)   # once: the dynamic model, no session asked for
    program.pins.wait()
    assert program.pins.pinned == ()
    dynamic_run = _run_of(program.dynamic_session)
    assert program._run_for([new]) == dynamic_run   # the second call of the shape asks for its session and runs
    program.pins.wait()                              # the dynamic model meanwhile
    assert program.pins.pinned == (key,)
    pinned_run = program._run_for([new])
    assert pinned_run not in (dynamic_run, program._run)
    for seed in range(3):   # other values of the pinned shape: eager's answer, as the dynamic model's
        x = _x(1, 12, seed)
        want, feed = model(x).detach(), {program._names[0]: x.numpy()}
        got = program(x)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got, torch.from_numpy(dynamic_run(program._output_names, feed, None)[0]),
                                   rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(program(new), first, rtol=1e-6, atol=1e-6)
    x = _x(1, 8, 5)   # the traced shape keeps its own session
    assert program._run_for([x]) is program._run
    torch.testing.assert_close(program(x), model(x).detach(), rtol=1e-5, atol=1e-5)


def test_the_caps_leave_later_shapes_on_the_dynamic_model(monkeypatch):
    model = Block().eval()
    monkeypatch.setattr(pinned_shapes, "MAX_SHAPES", 1)
    program = _program(model, _x(1, 8))
    for seq in (10, 10, 11, 11, 11):
        x = _x(1, seq, seq)
        torch.testing.assert_close(program(x), model(x).detach(), rtol=1e-5, atol=1e-5)
        program.pins.wait()
    assert program.pins.pinned == ((torch.Size([1, 10, 32]),),)
    assert program._run_for([_x(1, 11)]) == _run_of(program.dynamic_session)

    monkeypatch.setattr(pinned_shapes, "MAX_BYTES", 1)   # a model larger than the bytes cap: no pinned session
    program = _program(model, _x(1, 8))
    for _ in range(3):
        x = _x(2, 10)
        torch.testing.assert_close(program(x), model(x).detach(), rtol=1e-5, atol=1e-5)
    program.pins.wait()
    assert program.pins.pinned == ()


def test_threads_calling_several_shapes_while_sessions_open_get_eager_answers():
    model = Block().eval()
    program = _program(model, _x(1, 8))
    shapes = [(1, 8), (1, 12), (2, 8), (3, 5)]
    errors, mismatches = [], []

    def serve(worker):
        try:
            for i in range(12):
                batch, seq = shapes[(worker + i) % len(shapes)]
                x = _x(batch, seq, 100 * worker + i)
                got, want = program(x), model(x).detach()
                if not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
                    mismatches.append((batch, seq))
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)
    threads = [threading.Thread(target=serve, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    program.pins.wait()
    assert not errors and not mismatches
    assert set(program.pins.pinned) <= {(torch.Size([b, s, 32]),) for b, s in shapes[1:]}
    assert len(program.pins.pinned) >= 1   # each shape was called 18 times: at least one session opened


def test_counts_are_forgotten_past_the_bound(monkeypatch):
    monkeypatch.setattr(pinned_shapes, "MAX_COUNTED", 3)
    opened = []
    pins = pinned_shapes.PinnedShapes(lambda shapes: opened.append(shapes) or (lambda *a: None), model_bytes=1)
    for s in range(1, 5):   # four distinct shapes once each: the counts of the first three are dropped
        assert pins.run_for(((s,),)) is None
    assert pins.run_for(((1,),)) is None   # counted once again (forgotten): no session
    pins.wait()
    assert opened == [] and len(pins._counts) <= 3
    pins.run_for(((4,),))   # the fourth shape's count survived the clear: its second call asks for a session
    pins.wait()
    assert opened == [((4,),)] and pins.pinned == (((4,),),)


def test_openvino_runs_the_traced_shapes_and_shapes_called_again_on_models_compiled_for_them():
    pytest.importorskip("openvino")
    model = Block().eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = tracejit.optimize_for_inference(tracejit.trace(model, (_x(1, 8),)), backend="openvino")
    traced = ((1, 8, 32),)
    request, _ = program._static[traced]
    assert program._dynamic is None   # nothing compiled with dynamic axes yet
    x = _x(1, 8, 1)
    torch.testing.assert_close(program(x), model(x).detach(), rtol=1e-5, atol=1e-5)
    assert program._dynamic is None and request.get_input_tensor(0).shape == [1, 8, 32]
    new = ((2, 12, 32),)
    for seed in range(3):   # first call: the dynamic model; second: asks for the compiled one; third: either
        x = _x(2, 12, seed)
        torch.testing.assert_close(program(x), model(x).detach(), rtol=1e-5, atol=1e-5)
        program.pins.wait()
    assert program._dynamic is not None and program.pins.pinned == (new,)
    x = _x(2, 12, 7)
    torch.testing.assert_close(program(x), model(x).detach(), rtol=1e-5, atol=1e-5)
    pinned_request, _ = program.pins.run_for(new)
    assert pinned_request.get_input_tensor(0).shape == [2, 12, 32]


def test_a_forgotten_shape_is_counted_again():
    opened = []
    pins = pinned_shapes.PinnedShapes(lambda shapes: opened.append(shapes) or object(), model_bytes=1)
    for _ in range(2):
        pins.run_for(((3,),))
    pins.wait()
    assert pins.pinned == (((3,),),)
    pins.forget(((3,),))   # its run failed: the runtime may keep the failure in that compiled model
    assert pins.pinned == () and pins.run_for(((3,),)) is None
    pins.run_for(((3,),))
    pins.wait()
    assert opened == [((3,),), ((3,),)] and pins.pinned == (((3,),),)
