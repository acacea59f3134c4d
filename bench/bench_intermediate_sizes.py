"""Per-call cost of the onnxruntime / OpenVINO programs' intermediate-size check (backends/intermediate_sizes.py).

A guard on the size of an intermediate tensor (BERT's attention-mask path reads sizes after a few ops) is checked
before each run of the ONNX model by evaluating the slice of the traced program it reads on meta tensors of the
call's shapes. This times, in one process, interleaved rounds (medians and minimums, us per call), on BERT-base
(seq 128, batch 1; bench_core.build_bert):

- ``program``: ``optimize_for_inference(traced, backend=...)(*args)``, the check included (since round 4 a
  signature that passed is remembered: intermediate_sizes.PassedSignatures);
- ``meta check``: the check on meta tensors as every call ran it before (meta arguments made, the slice
  evaluated);
- ``remembered``: what a call with a signature that passed before pays (the signature made and looked up);
- and each one's share of a call.

Usage: ``OMP_NUM_THREADS=1 python bench/bench_intermediate_sizes.py [--rounds R] [--backend onnxruntime]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_core import build_bert  # noqa: E402

import tracejit  # noqa: E402
from tracejit.backends import intermediate_sizes  # noqa: E402


def per_call(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--backend", default="onnxruntime")
    opts = ap.parse_args(argv)
    torch.manual_seed(0)
    model, args = build_bert()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, args, check_trace=False)
        program = tracejit.optimize_for_inference(traced, backend=opts.backend)
    check = getattr(program, "size_guards", None)
    if check is None:
        print("the program holds no size guard ONNX cannot check: no per-call check")
        return 0
    guards = sum(1 for n in check.graph.nodes if n.op == "tracejit::guard")
    print(f"{opts.backend} program of BERT-base: {guards} guards checked per call, "
          f"{len(check.graph.nodes)} nodes in the checked slice")

    def run_check():
        meta_args, meta_kwargs = intermediate_sizes.meta_arguments(args, {})
        check(None, *meta_args, **meta_kwargs)

    passed = program.size_guard_signatures
    peers = {"program": (lambda: program(*args), 5), "meta check": (run_check, 20),
             "remembered": (lambda: passed.check(check, args, {}), 2000)}
    with torch.no_grad():
        program(*args)   # the example's signature passes once: remembered from then on
        times: dict = {k: [] for k in peers}
        for _ in range(opts.rounds):
            for k, (fn, n) in peers.items():
                times[k].append(per_call(fn, n))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {opts.rounds} interleaved rounds, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| peer | median us | min us | share of a call (medians / minimums) |")
    print("|---|---:|---:|---:|")
    call_med, call_min = statistics.median(times["program"]), min(times["program"])
    for k, v in times.items():
        med, low = statistics.median(v), min(v)
        print(f"| {k} | {med * 1e6:.1f} | {low * 1e6:.1f} | {med / call_med * 100:.3f}% / {low / call_min * 100:.3f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
