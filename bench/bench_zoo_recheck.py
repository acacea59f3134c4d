"""Re-measure a few bench_zoo rows precisely: the default backend against eager and the traced program.

bench_zoo.py builds every peer (torch.onnx export, onnxruntime, auto, ...) and reports medians of a few
rounds; on a loaded machine its ratios near 1 are noise. This script builds only the columns issue #25
item 1 compares (``eager``, ``jit freeze``, ``tracejit`` = the traced program, ``tracejit OFI`` = the default
``optimize_for_inference``; ``--auto`` adds ``backend="auto"``, ``--onnx`` tracejit's onnxruntime
program and ORT on torch.onnx's export) and times them in many interleaved rounds (each round
starts one column later; N calls per sample, N calibrated on eager to about ``--target`` seconds), reporting
each column's MINIMUM and MEDIAN per-call time and both ratios. Load only adds time, so under load the
minimum is the fairer figure. Run it at normal priority, one at a time, with OMP_NUM_THREADS=1.

Usage::

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD:/work/main/.venv/vision-tests python bench/bench_zoo_recheck.py \
        --models swin_hf,gpt2 --batches 1,8 --rounds 15 [--auto] [--onnx] [--json out.jsonl]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
for _p in (_BENCH_DIR, os.path.dirname(_BENCH_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import bench_peers  # noqa: E402
from peer_builders import _Quiet, make_jit_frozen, make_ort  # noqa: E402
import zoo_models  # noqa: E402
from zoo_models import ZOO  # noqa: E402

import tracejit  # noqa: E402


def measure(name: str, batch: int, rounds: int, target_s: float, auto: bool, onnx: bool) -> dict:
    """Per-call seconds (min, median) of each column for one zoo model and batch."""
    module, make_inputs = ZOO[name]()
    args = make_inputs(batch)
    with torch.no_grad(), _Quiet():
        traced = tracejit.trace(module, args, check_trace=False)
        columns = {"eager": module, "jit freeze": make_jit_frozen(module, args)[0], "tracejit": traced,
                   "tracejit OFI": tracejit.optimize_for_inference(traced)}
        if auto:
            columns["tracejit auto"] = tracejit.optimize_for_inference(traced, backend="auto")
        if onnx:
            columns["tracejit ONNX"] = tracejit.optimize_for_inference(traced, backend="onnxruntime")
            ort_run, ort_args = make_ort(module, args)   # a session's run and its own (output names, feed)
            columns["ORT (torch.onnx)"] = lambda *_, run=ort_run, a=ort_args: run(*a)
        for fn in columns.values():
            for _ in range(3):
                fn(*args)
        n = bench_peers.calibrate(module, args, target_s=target_s)
        samples = {c: [] for c in columns}
        names = list(columns)
        for r in range(rounds):
            k = r % len(names)
            for c in names[k:] + names[:k]:
                t0 = time.perf_counter()
                for _ in range(n):
                    columns[c](*args)
                samples[c].append((time.perf_counter() - t0) / n)
    row = {"model": name, "batch": batch, "rounds": rounds, "n": n, "load": os.getloadavg()[0],
           "min_us": {c: min(v) * 1e6 for c, v in samples.items()},
           "median_us": {c: statistics.median(v) * 1e6 for c, v in samples.items()}}
    if auto:
        row["auto"] = columns["tracejit auto"].backend
    return row


def show(row: dict) -> str:
    mn, md = row["min_us"], row["median_us"]
    cells = [f"{c}: min {mn[c]:.0f} ({mn[c] / mn['eager']:.2f}x eager) med {md[c]:.0f} ({md[c] / md['eager']:.2f}x)"
             for c in mn]
    ofi = f"OFI/traced min {mn['tracejit OFI'] / mn['tracejit']:.2f} med {md['tracejit OFI'] / md['tracejit']:.2f}"
    extra = f" auto chose {row['auto']}" if "auto" in row else ""
    return (f"{row['model']} b{row['batch']} (load {row['load']:.1f}, {row['rounds']} rounds x {row['n']}): {ofi};"
            f"{extra}\n    " + "\n    ".join(cells))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True)
    p.add_argument("--batches", default="1,8")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--target", type=float, default=0.05, help="seconds per sample (N calls)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--auto", action="store_true")
    p.add_argument("--onnx", action="store_true")
    p.add_argument("--json", default="", help="append each row to this JSON-lines file")
    p.add_argument("--fixed-malloc", action="store_true",
                   help="glibc keeps freed memory: no page faults per call for any peer (bench/fixed_malloc.py)")
    a = p.parse_args(argv)
    if a.fixed_malloc:
        from fixed_malloc import fix_malloc
        print(fix_malloc())
    torch.set_num_threads(a.threads)
    try:   # torchvision's C++ ops in pure torch (transformers imports torchvision when it is on the path)
        zoo_models._torchvision()
    except RuntimeError:
        pass
    for name in a.models.split(","):
        for batch in (int(b) for b in a.batches.split(",")):
            row = measure(name, batch, a.rounds, a.target, a.auto, a.onnx)
            print(show(row), flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
