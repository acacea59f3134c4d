"""First loads of two (or more) source trees against ``torch.jit.load``, in fresh processes, interleaved (session 28).

The models of bench_load.py (ResNet-50, BERT-base, GPT-2, Mask R-CNN at 320 x 320) are traced and saved once, with
this checkout's tracejit and torch.jit (``bench_load.save_files``). Then, ``--runs`` rounds, each starting one
fresh process per peer in turn: ``torch.jit.load`` of torch.jit's file and, for each TREE, ``tracejit.load`` of the
tracejit file with ``PYTHONPATH=TREE`` and an empty code cache (a first load; bench_load.CHILD: one thread, bytecode
cached, the file warm in the page cache, tracejit's import counted in its load). Bytecode is cached as an installed
package has it (pip compiles it): the children run without PYTHONDONTWRITEBYTECODE, which an environment may set
(until session 29 they inherited it and compiled tracejit's ~100 modules in every process: ~0.08 s of every
"import" figure; ``--no-bytecode-cache`` measures that). Prints the medians (CPU seconds)
and their ratios to torch.jit.load, with the median load average over the rounds (the machine is shared).

Usage::

    python bench/bench_load_ab.py [--runs N] [resnet50 bert gpt2 maskrcnn ...] --trees /work/main /work/wt/serve28
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_load import _child, save_files  # noqa: E402


def measure(name: str, d: str, runs: int, trees: list, bytecode: bool = True) -> None:
    tj, jit = save_files(name, d)
    def env(tree):
        e = dict(os.environ, PYTHONPATH=os.path.abspath(tree), OMP_NUM_THREADS="1", TRACEJIT_CACHE_DIR="",
                 PYTHONPYCACHEPREFIX=os.path.join(d, "pyc"))
        e.pop("PYTHONDONTWRITEBYTECODE", None)   # bytecode cached, as pip leaves an installed package (fresh_load.py)
        if not bytecode:   # every child compiles tracejit's modules from source (a checkout run that way)
            e["PYTHONDONTWRITEBYTECODE"] = "1"
        if name == "maskrcnn":   # its files name torchvision's ops: registered before the clock starts
            e["BENCH_VISION"] = os.path.join(os.path.dirname(HERE), "tests", "models")
        return e
    peers = {tree: ("tj", tj, env(tree)) for tree in trees}
    if jit is not None:
        peers = {"torch.jit.load": ("jit", jit, env(trees[0])), **peers}
    for kind, path, e in peers.values():   # untimed: bytecode written
        _child(kind, path, e)
    got, loads = {p: [] for p in peers}, []
    for _ in range(runs):
        for p, (kind, path, e) in peers.items():
            got[p].append(_child(kind, path, e)["cpu"])
            loads.append(os.getloadavg()[0])
    ref = statistics.median(got["torch.jit.load"]) if jit is not None else None
    row = [f"{name:9s}"]
    for p, v in got.items():
        m = statistics.median(v)
        row.append(f"{p} {m:.3f} s" + (f" ({m / ref:.2f}x)" if ref else ""))
    print("  ".join(row) + f"  load avg {statistics.median(loads):.2f}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--trees", nargs="+", required=True)
    ap.add_argument("--no-bytecode-cache", action="store_true", help="children compile tracejit's sources each time")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for n in a.models or ["resnet50", "bert", "gpt2", "maskrcnn"]:
            measure(n, d, a.runs, a.trees, not a.no_bytecode_cache)
