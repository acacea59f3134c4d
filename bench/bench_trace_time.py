"""Trace time of zoo models, min of N traces in one process (hunt20: outer_state.py's cost).

Usage::

    OMP_NUM_THREADS=1 python bench/bench_trace_time.py [--models gpt2 t5] [--n 8] [--outer off]

``--outer off`` gives frame_returns' profile hook no outer_state.OuterState (what tracing cost before hunt19's rule);
``--outer both`` interleaves on and off in one process. Prints each model's min / median seconds of
``tracejit.trace(model, example, check_trace=False)``, wall clock and this thread's CPU time (``time.thread_time``:
less moved by other processes on a shared machine).
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_models import ZOO as MODELS  # noqa: E402

import torch  # noqa: E402
import tracejit  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", nargs="+", default=["gpt2", "t5"])
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--outer", choices=["on", "off", "both"], default="on")
    a = p.parse_args()
    from tracejit.trace import api, frame_returns
    watching = frame_returns.watching

    class Off:   # the profile hook without outer_state: no call events looked at, no closures, no globals
        @staticmethod
        def watching(scanner, outer=None):
            return watching(scanner, None)
    hooks = {"on": frame_returns, "off": Off}
    modes = ["on", "off"] if a.outer == "both" else [a.outer]
    torch.set_num_threads(1)
    for name in a.models:
        model, make = MODELS[name]()
        example = make(1)
        wall = {m: [] for m in modes}
        cpu = {m: [] for m in modes}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tracejit.trace(model, example, check_trace=False)   # warm-up (imports, caches)
            for _ in range(a.n):
                for mode in modes:
                    api.frame_returns = hooks[mode]
                    gc.collect()
                    t0, c0 = time.perf_counter(), time.thread_time()
                    tracejit.trace(model, example, check_trace=False)
                    cpu[mode].append(time.thread_time() - c0)
                    wall[mode].append(time.perf_counter() - t0)
        api.frame_returns = frame_returns
        for mode in modes:
            print(f"{name}: outer {mode}: wall min {min(wall[mode]):.3f} s median {statistics.median(wall[mode]):.3f} s;"
                  f" cpu min {min(cpu[mode]):.3f} s median {statistics.median(cpu[mode]):.3f} s (n={a.n})")


if __name__ == "__main__":
    main()
