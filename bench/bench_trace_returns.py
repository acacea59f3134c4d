"""Trace-time cost of watching user frames' returns (trace/frame_returns.py, issue #10).

Traces BERT-base (random weights, seq 128, bench_core.build_bert) with the return hook on and
off (``frame_returns.watching`` swapped for a no-op), and on without its numpy check of C calls
(the hook as it was before issue #20 round 4 made it look at C calls), interleaved,
``--rounds`` rounds each; prints each round's seconds and the medians.

Usage::

    python bench/bench_trace_returns.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_core import build_bert  # noqa: E402

import tracejit  # noqa: E402
from tracejit.trace import api, frame_returns  # noqa: E402


@contextlib.contextmanager
def _off(scanner):
    yield


@contextlib.contextmanager
def _returns_only(scanner):
    """The hook before issue #20 round 4: returns only, no look at C calls (no other profiler installed)."""
    returning, user, is_user = scanner.returning, frame_returns._user_files, frame_returns._is_user

    def hook(frame, event, arg):
        if event == "return" and user.get(frame.f_code.co_filename, None) is not False \
                and is_user(frame.f_code.co_filename):
            returning(frame)
    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)


def trace_seconds(model, args, hook: bool, numpy_check: bool = True) -> float:
    class Patched:
        watching = staticmethod((frame_returns.watching if numpy_check else _returns_only) if hook else _off)
    saved = api.frame_returns
    api.frame_returns = Patched
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gc.collect()   # (a collection inside one round moved it by 2x)
            t0 = time.perf_counter()
            tracejit.trace(model, args, check_trace=False)
            return time.perf_counter() - t0
    finally:
        api.frame_returns = saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    rounds = ap.parse_args().rounds
    model, args = build_bert()
    trace_seconds(model, args, True)   # warm-up (imports, caches)
    peers = {"hook off": (False, True), "hook on, no numpy check": (True, False), "hook on": (True, True)}
    times: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(rounds):
        for name, (hook, numpy_check) in peers.items():
            times[name].append(trace_seconds(model, args, hook, numpy_check))
    for name, ts in times.items():
        print(f"{name}: rounds {', '.join(f'{t:.3f}' for t in ts)} s, median {statistics.median(ts):.3f} s")
    off, on = statistics.median(times["hook off"]), statistics.median(times["hook on"])
    print(f"added trace time: median {100 * (on - off) / off:+.1f}%, best round "
          f"{100 * (min(times['hook on']) - min(times['hook off'])) / min(times['hook off']):+.1f}%")
    bare = statistics.median(times["hook on, no numpy check"])
    print(f"the numpy check of C calls: median {100 * (on - bare) / bare:+.1f}%, best round "
          f"{100 * (min(times['hook on']) - min(times['hook on, no numpy check'])) / min(times['hook on, no numpy check']):+.1f}%")


if __name__ == "__main__":
    main()
