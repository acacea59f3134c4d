"""The oneDNN linears with and without their timing (passes/linear_timing.py), in one process (issue #25 item 1).

For each zoo model and batch (or each bench_peers workload, ``--workloads``): eager, the traced program, ``optimize_for_inference`` with the fixed rule (every
linear from ``MIN_MACS`` on in oneDNN: ``linear_timing.MEASURE = False``, the rule before the timing) and with the
linears timed where they run (the default), called in interleaved rounds (each round starts one variant later; N
calls per sample, calibrated on the traced program to ~``--target`` s). Prints each variant's minimum and median per
call and its ratio to eager and to the traced program, how many linears each optimized program runs in oneDNN, and
what the timing costs: ``optimize_for_inference`` with the fixed rule (after an untimed warm-up build), then with
the timing on an empty cache, then again (cached), in seconds.

    OMP_NUM_THREADS=1 taskset -c 1 python bench/linear_timing_ab.py --models alexnet,bert --batches 1,8
    OMP_NUM_THREADS=1 taskset -c 1 python bench/linear_timing_ab.py --models "" --workloads transformer,bert
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import torch

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
for _p in (_BENCH_DIR, os.path.dirname(_BENCH_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import tracejit  # noqa: E402
from tracejit.passes import linear_timing  # noqa: E402
from tracejit.passes.linear_kernels import linear_kernel_nodes  # noqa: E402
from zoo_models import ZOO  # noqa: E402


def _ofi(traced, measure: bool):
    """(the optimized program, seconds its build took) with the linear timing on or off."""
    linear_timing.MEASURE = measure
    try:
        start = time.perf_counter()
        optimized = tracejit.optimize_for_inference(traced)
        return optimized, time.perf_counter() - start
    finally:
        linear_timing.MEASURE = True


def _fused(optimized) -> int:
    fn = optimized.forward if isinstance(optimized, torch.nn.Module) else optimized._fn
    return len(linear_kernel_nodes(fn.lowered.graph))


def _sample(fn, args, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn(*args)
    return (time.perf_counter() - start) / n


def measure(model: str, batch: int, rounds: int, target: float, workload: bool = False) -> None:
    """One row: ``model`` at ``batch`` from the zoo, or the bench_peers workload ``model`` (``workload``)."""
    if workload:
        import bench_peers
        torch.manual_seed(0)
        module, args = bench_peers.WORKLOADS[model][1]()
    else:
        module, make_inputs = ZOO[model]()
        args = make_inputs(batch)
    with torch.no_grad():
        traced = tracejit.trace(module, args, check_trace=False)
        _ofi(traced, False)   # warm-up: imports, and the blocked conv regions' own timing (passes/blocked_timing.py)
        fixed, t_fixed = _ofi(traced, False)
        timed, t_timed = _ofi(traced, True)
        _, t_again = _ofi(traced, True)
        variants = {"eager": module, "traced": traced, "OFI fixed rule": fixed, "OFI timed": timed}
        for fn in variants.values():
            fn(*args)
        n = max(1, int(target / _sample(traced, args, 3)))
        names, times = list(variants), {k: [] for k in variants}
        for r in range(rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                times[k].append(_sample(variants[k], args, n))
    print(f"{model} {'(bench_peers)' if workload else f'b{batch}'}: {rounds} rounds x {n} calls, load {os.getloadavg()[0]:.1f}; oneDNN linears: fixed rule "
          f"{_fused(fixed)}, timed {_fused(timed)}; first OFI s: fixed {t_fixed:.2f}, timed {t_timed:.2f}, "
          f"timed again {t_again:.2f}")
    eager_min, eager_med = min(times["eager"]), statistics.median(times["eager"])
    base_min, base_med = min(times["traced"]), statistics.median(times["traced"])
    print(f"  {'variant':16s} {'min us':>10s} {'median us':>10s}  /eager min med  /traced min med")
    for k in names:
        lo, med = min(times[k]), statistics.median(times[k])
        print(f"  {k:16s} {lo * 1e6:10.1f} {med * 1e6:10.1f}  {lo / eager_min:9.2f} {med / eager_med:4.2f}"
              f"  {lo / base_min:10.2f} {med / base_med:4.2f}", flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="alexnet")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--workloads", default="", help="bench_peers workloads (transformer, bert, ...) after the models")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--target", type=float, default=0.05)
    ns = p.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    warnings.simplefilter("ignore")
    for model in filter(None, ns.models.split(",")):
        for batch in (int(b) for b in ns.batches.split(",")):
            measure(model, batch, ns.rounds, ns.target)
    for workload in filter(None, ns.workloads.split(",")):
        measure(workload, 1, ns.rounds, ns.target, workload=True)


if __name__ == "__main__":
    main()
