"""Trace-time cost of watching user frames' returns (trace/frame_returns.py, issue #10).

Traces BERT-base (random weights, seq 128, bench_core.build_bert) with the return hook on and
off (``frame_returns.watching`` swapped for a no-op), interleaved, ``--rounds`` rounds each;
prints each round's seconds and the medians.

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


def trace_seconds(model, args, hook: bool) -> float:
    class Patched:
        watching = staticmethod(frame_returns.watching if hook else _off)
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
    times: dict[str, list[float]] = {"hook off": [], "hook on": []}
    for _ in range(rounds):
        for name, hook in (("hook off", False), ("hook on", True)):
            times[name].append(trace_seconds(model, args, hook))
    for name, ts in times.items():
        print(f"{name}: rounds {', '.join(f'{t:.3f}' for t in ts)} s, median {statistics.median(ts):.3f} s")
    off, on = statistics.median(times["hook off"]), statistics.median(times["hook on"])
    print(f"added trace time: median {100 * (on - off) / off:+.1f}%, best round "
          f"{100 * (min(times['hook on']) - min(times['hook off'])) / min(times['hook off']):+.1f}%")


if __name__ == "__main__":
    main()
