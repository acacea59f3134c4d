"""``tracejit.save`` time, and the share of it spent in ``save_check`` (the check that save refuses what load would
refuse: serialize/save_check.py), on bench_peers' workloads, for one or two source trees (session 28).

Each tree runs in its own child process (``OMP_NUM_THREADS=1``, ``PYTHONPATH`` the tree), children interleaved
round by round; each child traces the workloads once, then saves each to memory once (the process's first save of that
workload: the first one also imports the writer and the checks) and then ``--saves`` times, and prints the
median and min of the save and of its check (``time.process_time``, CPU seconds: steadier on a shared machine). The
load average is printed beside each row (the machine is shared).

Usage::

    python bench/bench_save.py [--rounds N] [--saves N] [--workloads transformer,bert,resnet50] TREE [TREE ...]
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
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
import bench_peers as bp
import tracejit
from tracejit.serialize import save_check
spent = [0.0]
check = save_check.check_loadable
def timed(*a, **k):
    t = time.process_time()
    try:
        return check(*a, **k)
    finally:
        spent[0] += time.process_time() - t
save_check.check_loadable = timed
out = {}
for key in sys.argv[2].split(","):
    torch.manual_seed(0)
    model, args = bp.WORKLOADS[key][1]()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, args)
    spent[0] = 0.0
    t = time.process_time()
    tracejit.save(traced, io.BytesIO())   # the process's first save: it imports the writer and the checks
    first, first_check = time.process_time() - t, spent[0]
    saves, checks = [], []
    for _ in range(int(sys.argv[3])):
        spent[0] = 0.0
        t = time.process_time()
        tracejit.save(traced, io.BytesIO())
        saves.append(time.process_time() - t)
        checks.append(spent[0])
    out[key] = {"save": saves, "check": checks, "first": [first], "first_check": [first_check]}
print(json.dumps(out))
"""


def child(tree: str, keys: str, saves: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", CHILD, os.path.join(os.path.abspath(tree), "bench"), keys,
                           str(saves)], env=env, cwd=os.path.abspath(tree), capture_output=True, text=True,
                          timeout=1800)
    if proc.returncode:
        raise SystemExit(f"{tree}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--saves", type=int, default=5)
    ap.add_argument("--workloads", default="transformer,bert,resnet50")
    ap.add_argument("trees", nargs="+")
    a = ap.parse_args()
    got = {t: {} for t in a.trees}
    for _ in range(a.rounds):
        for t in a.trees:
            for key, r in child(t, a.workloads, a.saves).items():
                for k, v in r.items():
                    got[t].setdefault(key, {}).setdefault(k, []).extend(v)
    for key in a.workloads.split(","):
        for t in a.trees:
            r = got[t][key]
            print(f"{key:12s} {t:24s} save median {statistics.median(r['save']) * 1e3:7.1f} ms (min "
                  f"{min(r['save']) * 1e3:6.1f})  check median {statistics.median(r['check']) * 1e3:7.1f} ms (min "
                  f"{min(r['check']) * 1e3:6.1f})  first save of a process {statistics.median(r['first']) * 1e3:6.1f} ms "
                  f"(its check {statistics.median(r['first_check']) * 1e3:6.1f})  load avg {os.getloadavg()[0]:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
