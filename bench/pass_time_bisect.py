"""Which inference pass makes a zoo model's optimized program slower than its traced program (issue #25 item 1)?

Builds ``optimize_for_inference`` with every pass, with none, and without each pass in turn (the trace pipeline's
INFERENCE_PASSES and the in-memory kernels' IN_MEMORY_PASSES), and times each against the traced program in
interleaved rounds (N calls per sample, calibrated on the traced program to ~``--target`` s; each round starts one
variant later). Prints each variant's minimum and median per-call time and its ratio to the traced program's.
Load only adds time: under load read the minimum. Run at normal priority with OMP_NUM_THREADS=1.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python bench/pass_time_bisect.py whisper_encoder 1
    python bench/pass_time_bisect.py convnext_tiny,vit_tv,bert 1 --device cuda

``--device cuda``: the model and inputs on the GPU (float32 without TF32), each call followed by
``torch.cuda.synchronize()`` (a sample is a call's latency), and the in-memory passes left out one at a time are the
CUDA ones (``CUDA_IN_MEMORY_PASSES``: cuDNN conv fusion, sibling linears, the ``x @ Wt`` linear), each variant with
the build's timing of those passes off; one more, "every pass, CUDA ones timed", is what the default backend builds
(backends/cuda_pass_choice.py), and the choice it made is printed. Several models, comma-separated, run one after
the other.
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
from tracejit.backends import cuda_pass_choice  # noqa: E402
from tracejit.passes import pipeline  # noqa: E402
from zoo_models import ZOO, to_device  # noqa: E402


def _optimized(traced, passes, memory_passes, list_name="IN_MEMORY_PASSES", timed=False):
    """The program with ``passes`` and ``memory_passes``; on CUDA the build's own timed choice among its lowering
    passes (backends/cuda_pass_choice.py) only with ``timed``, so each variant runs the passes it names."""
    every, in_memory, measure = pipeline.INFERENCE_PASSES, getattr(pipeline, list_name), cuda_pass_choice.MEASURE
    pipeline.INFERENCE_PASSES = passes
    setattr(pipeline, list_name, memory_passes)
    cuda_pass_choice.MEASURE = timed
    try:
        return tracejit.optimize_for_inference(traced)
    finally:
        pipeline.INFERENCE_PASSES = every
        setattr(pipeline, list_name, in_memory)
        cuda_pass_choice.MEASURE = measure


def _sample(fn, args, n: int, cuda: bool = False) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn(*args)
        if cuda:
            torch.cuda.synchronize()
    return (time.perf_counter() - start) / n


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a zoo model, or several comma-separated")
    p.add_argument("batch", type=int, nargs="?", default=1)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--target", type=float, default=0.03)
    p.add_argument("--device", default="cpu")
    ns = p.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    warnings.simplefilter("ignore")
    if ns.device != "cpu":   # float32 as the CPU computes it: no TF32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    for model in ns.model.split(","):
        _bisect(model, ns)


def _bisect(model: str, ns) -> None:
    module, make_inputs = ZOO[model]()
    module = module.to(ns.device)
    args = to_device(make_inputs(ns.batch), ns.device)
    cuda = ns.device != "cpu"
    list_name = "CUDA_IN_MEMORY_PASSES" if cuda else "IN_MEMORY_PASSES"
    every, in_memory = pipeline.INFERENCE_PASSES, getattr(pipeline, list_name)
    with torch.no_grad():
        traced = tracejit.trace(module, args, check_trace=False)
        variants = {"traced": traced, "every pass": _optimized(traced, every, in_memory, list_name),
                    "no pass": _optimized(traced, (), (), list_name)}
        for i, (name, _) in enumerate(every):
            variants[f"without {name}"] = _optimized(traced, every[:i] + every[i + 1:], in_memory, list_name)
        for i, (name, _) in enumerate(in_memory):
            variants[f"without {name}"] = _optimized(traced, every, in_memory[:i] + in_memory[i + 1:], list_name)
        if cuda:   # what the default backend builds: the CUDA passes its timing keeps
            variants["every pass, CUDA ones timed"] = _optimized(traced, every, in_memory, list_name, timed=True)
            print(f"{model}: the build's choice: {cuda_pass_choice.LAST}", flush=True)
        for fn in variants.values():
            fn(*args)
        n = max(1, int(ns.target / _sample(traced, args, 3, cuda)))
        names, times = list(variants), {k: [] for k in variants}
        for r in range(ns.rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                times[k].append(_sample(variants[k], args, n, cuda))
    base_min, base_med = min(times["traced"]), statistics.median(times["traced"])
    print(f"{model} b{ns.batch} on {ns.device}: {ns.rounds} rounds x {n} calls, load {os.getloadavg()[0]:.1f}; us, "
          "min / median, ratio to the traced program", flush=True)
    for k in names:
        lo, med = min(times[k]), statistics.median(times[k])
        print(f"  {k:42s} {lo * 1e6:9.1f} {med * 1e6:9.1f}   {lo / base_min:5.2f} {med / base_med:5.2f}")


if __name__ == "__main__":
    main()
