"""Specializations chosen per call under load: 8 threads, mode switches and new shapes, 200
repetitions. Each call must give eager's value for the mode the module was in when the call
began (a trace never mixes code of two specializations); no call may raise."""
from __future__ import annotations

import threading
import time
import warnings

import pytest
import torch
from torch import nn

import tracejit
from threadlib import run_threads

THREADS, REPETITIONS = 8, 200


class Head(nn.Module):
    """A submodule with a size branch of its own: a root of one specialization calling the head of
    another would give a value neither mode nor size gives in eager."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 3)

    def forward(self, h):
        if h.size(0) > 3:
            return self.lin(h).relu()
        return self.lin(h).tanh() * 3


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 6)
        self.head = Head()

    def forward(self, x):
        h = self.body(x)
        h = h * 2 if self.training else h - 1   # the training flag: a guard on the root
        return self.head(h)


def _net():
    torch.manual_seed(0)
    return Net().eval()


def _inputs():
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(n, 4, generator=gen) for n in (1, 2, 5, 7, 3, 4, 6, 8)]


def _expected(model, inputs):
    out = {}
    with torch.no_grad():
        for mode in (False, True):
            model.train(mode)
            out[mode] = [model(x) for x in inputs]
    model.eval()
    for k, x in enumerate(inputs):   # the inputs and the mode both move eager's output
        assert not torch.allclose(out[False][k], out[True][k])
    assert not torch.allclose(model.head(model.body(inputs[2]) - 1), model.head.lin(model.body(inputs[2]) - 1).tanh() * 3)
    return out


def _traced_net(batch: int):
    """The shared setup: the net, its inputs, eager's answers (per mode) and the net traced on a batch of ``batch``."""
    model = _net()
    inputs = _inputs()
    expected = _expected(model, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (torch.randn(batch, 4),))
    return model, inputs, expected, traced


def test_phases_of_mode_switches_and_shapes_from_8_threads():
    """Between phases the main thread switches the mode; in each phase 8 threads call with sizes on
    both sides of the head's branch at once: they retrace together, and every value is eager's."""
    model, inputs, expected, traced = _traced_net(batch=2)
    start = threading.Barrier(THREADS + 1)
    end = threading.Barrier(THREADS + 1)
    wrong: list = []

    def worker(i):
        def run():
            for rep in range(REPETITIONS):
                start.wait(30)
                k = (i + rep) % len(inputs)
                mode = traced.training
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = traced(inputs[k])
                if not torch.allclose(got, expected[mode][k]):
                    wrong.append((rep, i, k, mode))
                end.wait(30)
        return run

    def coordinator():
        for rep in range(REPETITIONS):
            traced.train(rep % 3 == 1)
            start.wait(30)
            end.wait(30)

    run_threads(coordinator, *[worker(i) for i in range(THREADS)], timeout=300)
    assert wrong == []
    assert len(traced.specializations) == 4   # {eval, train} x {head's branch taken, not taken}
    assert traced._specializations.traces == 3


def test_mode_flipped_while_8_threads_call_gives_one_mode_per_call():
    """A thread flips the mode continuously while 8 threads call: each result is eager's in one
    mode, never a mix of two specializations, and no call raises."""
    model, inputs, expected, traced = _traced_net(batch=2)
    done = threading.Event()
    wrong: list = []

    def flipper():   # about a flip per millisecond: several per call of every thread
        flag = False
        while not done.is_set():
            flag = not flag
            traced.train(flag)
            time.sleep(0.001)

    def worker(i):
        def run():
            for rep in range(REPETITIONS):
                k = (i * 3 + rep) % len(inputs)
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = traced(inputs[k])
                if not (torch.allclose(got, expected[False][k]) or torch.allclose(got, expected[True][k])):
                    wrong.append((rep, i, k))
        return run

    def workers():
        try:
            run_threads(*[worker(i) for i in range(THREADS)], timeout=300)
        finally:
            done.set()

    run_threads(flipper, workers, timeout=320)
    assert wrong == []
    # a flag that flips between a call's attempts can make two threads trace the same case: bounded
    assert 3 <= len(traced.specializations) <= 8


def _released_together(call, calls: int = 1) -> dict:
    """``call(i)`` in THREADS threads released at once by a barrier (``calls`` times each, under no_grad,
    warnings ignored); ``{i: its last result}``."""
    go = threading.Barrier(THREADS)
    got = {}

    def worker(i):
        def run():
            go.wait(30)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for _ in range(calls):
                    got[i] = call(i)
        return run

    run_threads(*[worker(i) for i in range(THREADS)])
    return got


def test_mode_switch_retraces_only_once_for_8_threads():
    """Eight threads meet a new mode at once: one retrace is published, the others use it."""
    model, inputs, expected, traced = _traced_net(batch=5)
    traced.train()
    got = _released_together(lambda i: traced(inputs[6]))
    for i in range(THREADS):
        torch.testing.assert_close(got[i], expected[True][6])
    assert traced._specializations.traces == 1


class _Widths(torch.nn.Module):
    def forward(self, x):
        if x.shape[-1] > 8:
            return x * 3
        return x - 1


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_8_threads_meet_a_width_the_optimized_program_does_not_hold(backend):
    """The optimized program holds the narrow trace; eight threads call it at once with wide inputs: each call
    goes to the live traced object (backends/fallback.py hand_over), which traces again once for all of
    them, and every thread gets eager's answer for its own input."""
    if backend == "onnxruntime":
        pytest.importorskip("onnxruntime")
    model = _Widths().eval()
    traced = tracejit.trace(model, (torch.randn(2, 4),))
    program = tracejit.optimize_for_inference(traced, backend=backend)
    inputs = [torch.randn(2, 9 + i) for i in range(THREADS)]
    got = _released_together(lambda i: program(inputs[i]), calls=5)
    for i in range(THREADS):
        torch.testing.assert_close(got[i], model(inputs[i]))
    assert traced._specializations.traces == 1
