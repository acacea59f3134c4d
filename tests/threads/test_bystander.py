"""A trace in one thread changes nothing that another thread can observe.

The bystander thread runs eager code that touches every entry point tracing needs (range(),
a submodule call, a custom autograd.Function with its own backward, torch.jit.is_tracing())
and draws from torch's global generator, which it seeded, while the main thread traces the
same model repeatedly with the checker on. The traced forward waits until the bystander has
made progress, so bystander calls provably happen while a trace is being recorded.
"""
from __future__ import annotations

import itertools
import threading
import time

import torch
from torch import nn

import tracejit
from threadlib import assert_nothing_patched, run_threads

TRACES = 6


class Triple(torch.autograd.Function):
    """Forward multiplies by 3; backward deliberately returns 5*g, so a result shows which backward ran."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 5


class Block(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Model(nn.Module):
    """Submodules, range() over a size, a custom Function and is_tracing(): every patched entry point."""

    def __init__(self, n=6, on_trace=None):
        super().__init__()
        self.a, self.b = Block(n), Block(n)
        self.on_trace = on_trace
        self.seen_is_tracing: list[tuple[str, bool]] = []   # (thread name, torch.jit.is_tracing())

    def forward(self, x):
        if self.on_trace is not None and tracejit.is_tracing():
            self.on_trace()
        self.seen_is_tracing.append((threading.current_thread().name, torch.jit.is_tracing()))
        y = self.a(x)
        for i in range(x.size(1) // 3):
            y = y + i
        return self.b(Triple.apply(y))


def bystander_step(model, x, i, generator):
    """Eager work; returns (what it computed, what it should be) for the comparison."""
    n = 3 + i % 4
    got_range = list(range(n))
    with torch.no_grad():
        out = model(x)
    xr = x.clone().requires_grad_(True)
    Triple.apply(xr).sum().backward()
    got = (got_range, out, xr.grad, torch.jit.is_tracing(), tracejit.is_tracing(), torch.rand(3))
    want = (list(itertools.islice(itertools.count(), n)), None,   # (the module output: checked by the caller)
            torch.full_like(x, 5.0), False, False,
            torch.rand(3, generator=generator))
    return got, want


def test_bystander_sees_nothing_while_another_thread_traces():
    torch.manual_seed(0)
    progress = [0]
    stop = threading.Event()   # the tracer is done
    gone = threading.Event()   # the bystander is done (or failed): the tracer stops waiting for it

    def wait_for_bystander():
        start, deadline = progress[0], time.monotonic() + 5
        while progress[0] < start + 2 and time.monotonic() < deadline and not gone.is_set():
            time.sleep(0.0005)
        overlaps.append(progress[0] - start)

    overlaps: list[int] = []
    model = Model(on_trace=wait_for_bystander).eval()   # the bystander calls the very module being traced
    x = torch.randn(4, 6)
    with torch.no_grad():
        eager_out = model(x)
    mismatches: list[str] = []
    saved_rng = torch.get_rng_state()

    def bystander():
        threading.current_thread().name = "bystander"
        torch.manual_seed(1234)
        generator = torch.Generator().manual_seed(1234)   # the stream the global generator must give
        try:
            _loop(generator)
        finally:
            gone.set()

    def _loop(generator):
        i = 0
        while not stop.is_set() or i < 5:
            got, want = bystander_step(model, x, i, generator)
            checks = [("range", got[0] == want[0]), ("module call", torch.equal(got[1], eager_out)),
                      ("custom Function backward", torch.equal(got[2], want[2])),
                      ("torch.jit.is_tracing", got[3] is False), ("tracejit.is_tracing", got[4] is False),
                      ("global random draw", torch.equal(got[5], want[5]))]
            mismatches.extend(f"call {i}: {name}" for name, ok in checks if not ok)
            i += 1
            progress[0] = i

    traced = []

    def tracer():
        try:
            for _ in range(TRACES):
                # the model records what it saw in a list and times its wait: test instrumentation, not state
                traced.append(tracejit.trace(model, (x,), allow_frozen_python_state=True))
        finally:
            stop.set()

    try:
        run_threads(bystander, tracer)
    finally:
        torch.set_rng_state(saved_rng)
    assert mismatches == [], mismatches[:10]
    assert progress[0] >= 2 * TRACES
    assert len(overlaps) >= TRACES and all(n >= 2 for n in overlaps), overlaps   # the bystander ran mid-trace
    assert any(flag for name, flag in model.seen_is_tracing if name != "bystander")
    assert not any(flag for name, flag in model.seen_is_tracing if name == "bystander")
    assert_nothing_patched()
    # the traces saw only their own thread: one Function entry each, no bystander calls recorded
    model.on_trace = None
    reference = torch.jit.trace(model, (x,))
    for t in traced:
        kinds = [e.kind for e in t.ledger]
        assert kinds.count("autograd_function") == 1, t.ledger
        for batch in (1, 7):
            x2 = torch.randn(batch, 6)
            with torch.no_grad():
                torch.testing.assert_close(t(x2), model(x2))
                torch.testing.assert_close(t(x2), reference(x2))


def _uses_is_tracing(x: torch.Tensor) -> torch.Tensor:
    if torch.jit.is_tracing():
        return x + 1
    return x - 1


def test_torchscript_still_compiles_is_tracing_while_tracing_in_two_threads():
    """TorchScript maps torch.jit.is_tracing by identity; tracing must keep that function object."""
    answers: dict[str, list] = {"tracing": [], "other": []}
    inside = threading.Event()
    done = threading.Event()

    def f(x):
        answers["tracing"].append((torch.jit.is_tracing(), torch.jit._trace.is_tracing()))
        inside.set()
        assert done.wait(10)
        torch.jit.script(_uses_is_tracing)   # compiles in the tracing thread
        return x * 2

    def other():
        assert inside.wait(10)
        try:
            scripted = torch.jit.script(_uses_is_tracing)   # compiles while the other thread traces
            answers["other"].append((torch.jit.is_tracing(), float(scripted(torch.zeros(1))[0])))
        finally:
            done.set()

    results = []
    run_threads(lambda: results.append(tracejit.trace(f, (torch.ones(3),), check_trace=False)), other)
    assert answers["tracing"] == [(True, True)]
    assert answers["other"] == [(False, -1.0)]
    assert torch.equal(results[0](torch.arange(4.0)), torch.arange(4.0) * 2)
    assert_nothing_patched()


@torch.jit._script_if_tracing
def _scaled(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def test_script_if_tracing_helper_is_recorded_not_frozen():
    """torchvision's pattern: a helper that torch.jit.trace compiles and traces through; tracejit records its ops."""
    def f(x):
        return _scaled(x) - x.sum()

    x = torch.randn(3)
    traced = tracejit.trace(f, (x,))
    reference = torch.jit.trace(f, (x,))
    for new in (torch.randn(3), torch.randn(5), torch.randn(1)):
        torch.testing.assert_close(traced(new), f(new))
        torch.testing.assert_close(traced(new), reference(new))
    assert [e.kind for e in traced.ledger] == []


def test_failing_trace_leaves_nothing_patched_and_thread_can_trace_again():
    class Boom(RuntimeError):
        pass

    def fails(x):
        y = x * 2
        for _ in range(x.size(0)):
            y = y + 1
        raise Boom("raised in the middle of the trace")

    x = torch.randn(3)
    before = torch.is_grad_enabled()
    try:
        tracejit.trace(fails, (x,))
    except Boom:
        pass
    else:
        raise AssertionError("the trace should have raised")
    assert_nothing_patched()
    assert torch.jit.is_tracing() is False and tracejit.is_tracing() is False
    assert torch.is_grad_enabled() == before
    assert torch.equal(tracejit.trace(lambda a: a + 1, (x,))(x), x + 1)


def test_trace_inside_a_trace_in_the_same_thread_still_raises():
    def inner(x):
        return x + 1

    def outer(x):
        return tracejit.trace(inner, (x,))(x)

    try:
        tracejit.trace(outer, (torch.ones(2),))
    except tracejit.TraceError as e:
        assert "this thread is recording another trace" in str(e)
    else:
        raise AssertionError("a nested trace in one thread should raise TraceError")
    assert_nothing_patched()
