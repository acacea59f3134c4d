"""passes/paired_timing.py, the timing both measured lowering passes share (blocked conv regions, oneDNN linears):
interleaved samples that stop where a budget would be overrun, and a per-process cache keyed by the thread count."""
from __future__ import annotations

import time

import torch

from tracejit.passes import paired_timing


def test_interleaved_gives_each_callables_own_per_call_time():
    fast, slow = paired_timing.interleaved(lambda: None, lambda: time.sleep(2e-3))
    assert fast < 1e-4 and 2e-3 <= slow < 0.1


def test_samples_that_would_end_past_the_deadline_are_not_taken():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.01)
    # the warm-up and the estimate take ~30 ms; three rounds of both would end ~60 ms later
    assert paired_timing.interleaved(slow, slow, time.perf_counter() + 0.05) is None
    assert len(calls) == 3
    assert paired_timing.interleaved(slow, slow, time.perf_counter() + 5) is not None


def test_measured_keeps_each_key_per_thread_count_and_never_keeps_a_miss():
    cache, measures = {}, []

    def measure():
        measures.append(1)
        return (1.0, 2.0)
    later = time.perf_counter() + 5
    assert paired_timing.measured(cache, ("a",), measure, later) == (1.0, 2.0)
    assert paired_timing.measured(cache, ("a",), measure, later) == (1.0, 2.0) and len(measures) == 1
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        assert paired_timing.measured(cache, ("a",), measure, later) == (1.0, 2.0) and len(measures) == 2
    finally:
        torch.set_num_threads(threads)
    assert paired_timing.measured(cache, ("b",), measure, time.perf_counter() - 1) is None   # past the deadline
    assert paired_timing.measured(cache, ("c",), lambda: None, later) is None                # cut short
    assert len(measures) == 2 and len(cache) == 2
