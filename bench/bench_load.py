"""``tracejit.load`` against ``torch.jit.load`` in fresh processes, on real saved programs (round 27).

Each model (ResNet-50, BERT-base, GPT-2, Mask R-CNN at 320 x 320; random weights, eval) is traced once with
``tracejit.trace`` and once with ``torch.jit.trace`` and saved to a temp directory. Then, interleaved, ``--runs``
fresh ``python`` processes per peer (``torch.set_num_threads(1)``, bytecode cached, files warm in the page cache)
each time one load with ``time.perf_counter`` and ``time.process_time`` after ``import torch`` (tracejit's
import counted in its load: it stands where torch.jit.load does):

- ``torch.jit.load`` of torch.jit.trace's file;
- ``tracejit first load``: an empty code cache (the first load of the file on a machine: every check, compile);
- ``tracejit cached``: the code cache written by an untimed run (any later start on that machine).

Prints the medians (CPU seconds, the steadier on a busy machine, and wall) and the ratios to torch.jit.load (to
tracejit's first load where torch.jit cannot trace or save the model: Mask R-CNN).
``--profile NAME`` instead prints the top of a cProfile of one first load of NAME in this process. Each row also
prints the load average (a shared machine). bench_load_ab.py compares source trees the same way.

Usage::

    python bench/bench_load.py [--runs N] [--profile NAME] [resnet50 bert gpt2 maskrcnn ...]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import tracejit  # noqa: E402
from bench_call_allowance import MODELS  # noqa: E402

CHILD = r"""
import json, os, sys, time
import torch
torch.set_num_threads(1)
if os.environ.get("BENCH_VISION"):   # torchvision's ops registered first (tests/models/torchvision_ops.py), untimed
    sys.path.insert(0, os.environ["BENCH_VISION"])
    from torchvision_ops import import_torchvision
    import_torchvision()
t0, c0 = time.perf_counter(), time.process_time()
if sys.argv[1] == "jit":
    torch.jit.load(sys.argv[2])
else:
    import tracejit
    tracejit.load(sys.argv[2])
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}))
"""


def save_files(name: str, d: str) -> tuple[str, str]:
    model, traces = MODELS[name]()
    example = traces[0][0]
    tj, jit = os.path.join(d, f"{name}.tj"), os.path.join(d, f"{name}.pt")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracejit.save(tracejit.trace(model, example, check_trace=False), tj)
        try:
            torch.jit.save(torch.jit.trace(model, example, check_trace=False, strict=False), jit)
        except Exception as e:   # noqa: BLE001 - torch.jit cannot save some models (Mask R-CNN): tracejit alone
            print(f"{name}: torch.jit.trace / save failed ({type(e).__name__}): tracejit's loads only", flush=True)
            jit = None
    return tj, jit


def _child(kind: str, path: str, env: dict) -> dict:
    # cwd: the file's folder. ``python -c`` puts the working directory first on sys.path, before PYTHONPATH: run from
    # a checkout, every child imported that checkout's tracejit, whatever tree bench_load_ab.py named (session 30)
    out = subprocess.run([sys.executable, "-c", CHILD, kind, path], env=env, capture_output=True, text=True,
                         timeout=600, cwd=os.path.dirname(os.path.abspath(path)))
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(name: str, d: str, runs: int) -> None:
    tj, jit = save_files(name, d)
    base = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", PYTHONPYCACHEPREFIX=os.path.join(d, "pyc"))
    base.pop("PYTHONDONTWRITEBYTECODE", None)   # else every child compiles tracejit's ~100 modules from source
    if name == "maskrcnn":   # its files name torchvision's ops: the children register them before the clock starts
        base["BENCH_VISION"] = os.path.join(ROOT, "tests", "models")
    cached = dict(base, TRACEJIT_CACHE_DIR=os.path.join(d, f"cache-{name}"))
    peers = {"torch.jit.load": ("jit", jit, base), "tracejit first load": ("tj", tj, dict(base, TRACEJIT_CACHE_DIR="")),
             "tracejit cached": ("tj", tj, cached)}
    if jit is None:
        del peers["torch.jit.load"]
    for kind, path, env in peers.values():   # untimed: bytecode and the code cache written
        _child(kind, path, env)
    got = {p: [] for p in peers}
    for _ in range(runs):
        for p, (kind, path, env) in peers.items():
            got[p].append(_child(kind, path, env))
    first = got.get("torch.jit.load") or got["tracejit first load"]   # the reference of the ratios
    ref = statistics.median(r["cpu"] for r in first)
    ref_wall = statistics.median(r["wall"] for r in first)
    for p, rows in got.items():
        cpu, wall = statistics.median(r["cpu"] for r in rows), statistics.median(r["wall"] for r in rows)
        print(f"{name:9s} {p:20s} cpu {cpu:6.3f} s ({cpu / ref:5.2f}x)  wall {wall:6.3f} s ({wall / ref_wall:5.2f}x)"
              f"  load avg {os.getloadavg()[0]:.2f}", flush=True)   # the machine is shared: say how busy


def profile(name: str, d: str) -> None:
    tj, _ = save_files(name, d)
    os.environ["TRACEJIT_CACHE_DIR"] = ""
    tracejit.load(tj)   # warm: imports
    prof = cProfile.Profile()
    prof.enable()
    tracejit.load(tj)
    prof.disable()
    pstats.Stats(prof).sort_stats(os.environ.get("BENCH_SORT", "cumulative")).print_stats(45)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--profile")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        if a.profile:
            profile(a.profile, d)
        else:
            for n in a.models or ["resnet50", "bert", "gpt2", "maskrcnn"]:
                measure(n, d, a.runs)
