"""Which of two ways of running one op is faster on this machine? Timed where the program is lowered, once per process.

Issue #25 item 1: a kernel that pays on one CPU can lose on another (oneDNN's blocked convs at batch 1, oneDNN's
linear on a matrix-vector product), so the lowering passes that choose between torch's op and a kernel measure both
at the op's traced size instead of trusting a fixed rule: passes/blocked_timing.py for the blocked conv regions,
passes/linear_timing.py for the oneDNN linears. This module is what they share:

* ``interleaved(a, b, deadline)``: the per-call times of two callables, in ``ROUNDS`` interleaved samples (the
  minimum of each counts: load only adds time), or None when the samples would not end by ``deadline``;
* ``random_input(shape)``: what they time on, drawn from a private generator: building a program leaves the
  caller's random numbers as they were (torch.jit's freeze draws none);
* ``measured(cache, key, measure, deadline)``: a pass's per-process cache of such times (its own dict, keyed by
  what the time depends on, plus the thread count here), measured on a miss unless the deadline has passed. A miss
  that could not be measured is None and is not cached: the caller keeps torch's op (default-deny).

One lock (``LOCK``) serializes every measurement of the process: two timings at once would slow each other.

>>> import time, torch
>>> x = torch.randn(64, 64)
>>> fast, slow = interleaved(lambda: x + 1, lambda: x @ x @ x, time.perf_counter() + 5)
>>> 0 < fast < 1 and 0 < slow < 1
True
>>> cache = {}
>>> first = measured(cache, ("example",), lambda: (1.0, 2.0), time.perf_counter() + 5)
>>> measured(cache, ("example",), lambda: (3.0, 4.0), time.perf_counter() - 1) == first == (1.0, 2.0)
True
>>> measured(cache, ("another",), lambda: (1.0, 2.0), time.perf_counter() - 1) is None   # past the deadline
True
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import torch

ROUNDS = 3           # interleaved samples per variant; the minimum of each counts
SAMPLE_S = 2e-4      # each sample repeats a call until it lasts about this long
LOCK = threading.RLock()

Times = tuple[float, float]


def measured(cache: dict, key: tuple, measure: Callable[[], Optional[Times]], deadline: float) -> Optional[Times]:
    """``cache``'s times for ``key`` at this thread count, from ``measure()`` (under ``LOCK``, without autograd)
    when absent and ``deadline`` (a ``time.perf_counter()`` value) has not passed; None when not measured."""
    key = key + (torch.get_num_threads(),)
    with LOCK:
        if key in cache:
            return cache[key]
        if time.perf_counter() > deadline:
            return None
        with torch.no_grad():
            times = measure()
        if times is not None:
            cache[key] = times
        return times


def interleaved(a: Callable, b: Callable, deadline: Optional[float] = None, rounds: int = ROUNDS) -> Optional[Times]:
    """The minimum per-call time of ``a`` and ``b`` over ``rounds`` interleaved samples (one warm-up call each),
    or None when, after the warm-up, the samples would not end by ``deadline`` (None: no deadline)."""
    times = interleaved_all((a, b), deadline, rounds)
    return None if times is None else (times[0], times[1])


def interleaved_all(fns, deadline: Optional[float] = None, rounds: int = ROUNDS) -> Optional[list[float]]:
    """``interleaved`` for any number of callables: the minimum per-call time of each over ``rounds``
    interleaved samples, each sample repeating a call until it lasts about ``SAMPLE_S`` (the repeat count set by
    the last callable's warm call), or None when the samples would not end by ``deadline``."""
    for fn in fns:
        fn()
    start = time.perf_counter()
    fns[-1]()
    once = max(time.perf_counter() - start, 1e-7)
    reps = max(1, min(1000, int(SAMPLE_S / once)))
    if deadline is not None and time.perf_counter() + len(fns) * rounds * reps * once > deadline:
        return None
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / reps)
    return best


def random_input(shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A standard-normal tensor of ``shape`` from a private generator (the caller's random state is untouched)."""
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(0)).to(dtype)
