"""Before / after a refactor: the five bench_peers workloads run with the tracejit of two source trees.

Each round starts one fresh process per tree, alternating (A, B, A, B, ...), so a drifting machine load
hits both alike; each process builds the five workloads of bench/bench_peers.py (MLP, elementwise chain,
TransformerEncoder, ResNet-50, BERT-base), then times, with ``OMP_NUM_THREADS=1``:

* trace: ``tracejit.trace`` (check_trace on, the default), seconds
* call: the traced program, per call (median of interleaved batches), microseconds
* ofi: ``optimize_for_inference`` build (s) and its program per call (us)
* save / load: ``tracejit.save`` to memory and ``tracejit.load`` back (ms)

Medians over the rounds and the lowest value (load only adds time) are printed as a markdown table.

    python bench/bench_program_ab.py --before /tmp/main-tree --after . --rounds 4

Each tree must hold its own ``bench/`` beside ``tracejit/`` (``git archive <rev> tracejit bench``): the child
imports bench_peers from it, and bench_peers imports tracejit from that tree (checked: the child refuses to
time another tree's tracejit). An even number of rounds runs each side first equally often.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import io, json, sys, time, warnings
import torch
torch.set_num_threads(1)
sys.path.insert(0, sys.argv[1])
import bench_peers as bp
import tracejit
import os
tree = os.path.dirname(sys.argv[1])
assert os.path.dirname(os.path.dirname(os.path.abspath(tracejit.__file__))) == tree, (tracejit.__file__, tree)
warnings.simplefilter("ignore")
out = {}

def per_call(fn, args, n):
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        best.append((time.perf_counter() - t0) / n * 1e6)
    best.sort()
    return best[len(best) // 2]

for key in sys.argv[2].split(","):
    torch.manual_seed(0)
    model, args = bp.WORKLOADS[key][1]()
    r = {}
    with torch.no_grad():
        t0 = time.perf_counter(); traced = tracejit.trace(model, args); r["trace_s"] = time.perf_counter() - t0
        t0 = time.perf_counter(); opt = tracejit.optimize_for_inference(traced); r["ofi_s"] = time.perf_counter() - t0
        for f in (model, traced, opt):
            f(*args); f(*args)
        t0 = time.perf_counter(); model(*args); one = time.perf_counter() - t0
        n = max(1, min(200, int(0.05 / max(one, 1e-6))))
        r["call_us"] = per_call(traced, args, n)
        r["ofi_call_us"] = per_call(opt, args, n)
        r["eager_us"] = per_call(model, args, n)
    buf = io.BytesIO()
    t0 = time.perf_counter(); tracejit.save(traced, buf); r["save_ms"] = (time.perf_counter() - t0) * 1e3
    raw = buf.getvalue()
    t0 = time.perf_counter(); tracejit.load(io.BytesIO(raw)); r["load_ms"] = (time.perf_counter() - t0) * 1e3
    out[key] = r
print(json.dumps(out))
"""

KEYS = ("mlp", "elementwise", "transformer", "resnet50", "bert")
METRICS = ("trace_s", "ofi_s", "eager_us", "call_us", "ofi_call_us", "save_ms", "load_ms")


def run(tree: str, keys) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), OMP_NUM_THREADS="1")
    # the tree's own bench/: bench_peers puts its repository root first on sys.path and imports tracejit from
    # there, so the bench dir of the tree measured decides which tracejit runs (before this, both sides ran
    # the tracejit of the tree holding this script: the program4 round compared a tree with itself)
    bench_dir = os.path.join(os.path.abspath(tree), "bench")
    if not os.path.exists(os.path.join(bench_dir, "bench_peers.py")):
        raise SystemExit(f"{tree}: no bench/bench_peers.py (copy the tree's bench/ with its tracejit/)")
    # cwd = the tree: `python -c` puts the working directory first on sys.path, ahead of PYTHONPATH, so run from
    # a checkout it would import that checkout's tracejit (the assertion in CHILD caught it)
    proc = subprocess.run([sys.executable, "-c", CHILD, bench_dir, ",".join(keys)], env=env, cwd=os.path.abspath(tree),
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise SystemExit(f"{tree}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workloads", default=",".join(KEYS))
    ns = p.parse_args(argv)
    keys = ns.workloads.split(",")
    got = {"before": [], "after": []}
    for r in range(ns.rounds):
        for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
            got[side].append(run(getattr(ns, side), keys))
            print(f"round {r + 1} {side} done; load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    print(f"{ns.rounds} rounds, alternating fresh processes, OMP_NUM_THREADS=1; median (min) per side")
    print("| workload | metric | before | after | after / before (median) |")
    print("|---|---|---|---|---|")
    for k in keys:
        for m in METRICS:
            b = [x[k][m] for x in got["before"]]
            a = [x[k][m] for x in got["after"]]
            mb, ma = statistics.median(b), statistics.median(a)
            print(f"| {k} | {m} | {mb:.4g} ({min(b):.4g}) | {ma:.4g} ({min(a):.4g}) | {ma / mb:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
