"""Code the garbage collector runs in the tracing thread is not forward's (issue #20; trace/not_forward.py).

A ``gc.callbacks`` callback, a ``__del__`` and a ``weakref.finalize`` callback may run in the tracing thread
while forward runs (forward allocated what they free). A clock read or a draw there is not part of forward's
answer: tracing is neither refused nor warned. The same read made by forward itself, or by a helper forward
calls, is still refused naming its line.
"""
from __future__ import annotations

import functools
import gc
import inspect
import random
import time
import warnings
import weakref

import numpy as np
import pytest
import torch

import tracejit
from trace_testlib import marker_lines

LINE = marker_lines(inspect.getsourcefile(inspect.currentframe()))
FILE = inspect.getsourcefile(inspect.currentframe())


class Cycle:
    def __init__(self):
        self.me = self


def allocating(x):
    """Makes cyclic garbage and collects it: the collector runs inside forward."""
    for _ in range(50):
        Cycle()
    gc.collect()
    return x * 2


def trace_quietly_and_strictly(fn, example):
    """Trace with every warning an error: a refusal raises, a python_state warning would fail too."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracejit.TracerWarning)
        return tracejit.trace(fn, example, check_trace=False)


@pytest.fixture
def gc_callback():
    calls = []

    def callback(phase, info):
        calls.append((phase, time.perf_counter(), random.random()))

    gc.callbacks.append(callback)
    try:
        yield calls
    finally:
        gc.callbacks.remove(callback)


def test_a_gc_callback_reading_the_clock_during_a_collection_forward_runs(gc_callback):
    traced = trace_quietly_and_strictly(allocating, (torch.randn(3),))
    assert gc_callback, "the collection must have run the callback during the trace"
    assert not [e for e in traced.ledger if e.kind == "python_state"]
    x = torch.randn(5)
    assert torch.equal(traced(x), x * 2)


def test_a_gc_callback_during_an_automatic_collection(gc_callback):
    def allocates_a_lot(x):
        for _ in range(2000):
            Cycle()
        return x + 1

    old = gc.get_threshold()
    gc.set_threshold(10)   # the allocations above trigger collections by themselves
    try:
        trace_quietly_and_strictly(allocates_a_lot, (torch.randn(3),))
    finally:
        gc.set_threshold(*old)
    assert gc_callback


class ClockOnDelete:
    def __del__(self):
        self.when = time.time()


def test_a_del_that_reads_the_clock_when_forward_drops_the_object():
    def drops(x):
        obj = ClockOnDelete()
        del obj   # the reference count reaches zero: __del__ runs here, in the tracing thread
        return x - 1

    trace_quietly_and_strictly(drops, (torch.randn(3),))


def test_a_weakref_finalize_callback_that_draws():
    drawn = []

    def drops(x):
        obj = Cycle.__new__(Cycle)
        weakref.finalize(obj, lambda: drawn.append(random.random()))
        del obj
        return x * 3

    trace_quietly_and_strictly(drops, (torch.randn(3),))
    assert drawn


def clock_helper():
    return time.perf_counter()  # @clock_helper


def test_forward_and_its_helpers_are_still_refused_while_a_callback_is_installed(gc_callback):
    def reads(x):
        gc.collect()
        return x * (clock_helper() > 0)

    with pytest.raises(tracejit.TraceError) as err:
        trace_quietly_and_strictly(reads, (torch.randn(3),))
    assert f"{FILE}:{LINE('clock_helper')}:" in str(err.value)


def test_the_bracket_is_gone_after_the_trace():
    before = list(gc.callbacks)
    trace_quietly_and_strictly(allocating, (torch.randn(3),))
    assert gc.callbacks == before


class Node:
    pass


def test_a_weakref_callback_that_reads_the_clock_and_draws_when_forward_drops_the_object():
    seen = []

    def on_dead(ref):   # a plain weakref.ref callback, run by the reference count reaching zero (no collection)
        seen.append((time.perf_counter(), random.random(), np.random.rand()))

    class Owner:
        def on_dead(self, ref):   # a bound method as the callback
            seen.append(time.time())

    owner = Owner()

    def drops(x):
        a, b = Node(), Node()
        refs = [weakref.ref(a, on_dead), weakref.ref(b, owner.on_dead),
                weakref.ref(Node(), functools.partial(lambda tag, ref: seen.append(random.random()), "t"))]
        del a, b
        return x * 3 + len(refs)

    old = gc.isenabled()
    gc.disable()   # no collection: the callbacks run from the reference counts alone
    try:
        traced = trace_quietly_and_strictly(drops, (torch.randn(3),))
    finally:
        if old:
            gc.enable()
    assert len(seen) == 3, seen
    assert not [e for e in traced.ledger if e.kind == "python_state"]


def test_forward_reading_the_clock_while_holding_a_live_weakref_is_still_refused():
    keep = Node()

    def reads(x, ref=weakref.ref(keep)):
        return x * (time.perf_counter() > 0)  # @reads_with_live_ref

    with pytest.raises(tracejit.TraceError) as err:
        trace_quietly_and_strictly(reads, (torch.randn(3),))
    assert f"{FILE}:{LINE('reads_with_live_ref')}:" in str(err.value)
