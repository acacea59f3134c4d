"""Guard cost: per-call time of tracejit programs with and without guards.

Workloads: the MLP and BERT-base of bench_core.py (same builders, inputs and
methodology: warm-up, N calibrated once, interleaved rounds, medians). Peers:

* ``guards=True``     every guard the trace made (sizes, ranks, values, training flag)
* ``guards="shapes"`` only the guards that need no device sync
* ``guards=False``    no guards (the old behaviour; the training flag is still checked)

Also prints how many guards each program holds. Target (issue 10): guards add at
most 5% (MLP) and 1% (BERT) per call.

Usage::

    python bench/bench_guards.py [--rounds R] [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_core import build_bert, build_mlp, check_outputs, cpu_model, time_interleaved  # noqa: E402

import tracejit  # noqa: E402

POLICIES = {"guards=True": True, 'guards="shapes"': "shapes", "guards=False": False}


def count_guards(traced) -> int:
    modules = [traced] if isinstance(traced, tracejit.TracedFunction) else list(traced.modules())
    fns = [traced._fn] if isinstance(traced, tracejit.TracedFunction) else [
        fn for m in modules for fn in m._traced_methods.values()]
    return sum(1 for fn in fns for n in fn.graph.nodes if n.op == "tracejit::guard")


def bench(name: str, model, args, rounds: int) -> dict:
    peers = {"eager": model}
    counts = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, policy in POLICIES.items():
            peers[label] = tracejit.trace(model, args, guards=policy, check_trace=False)
            counts[label] = count_guards(peers[label])
    problems = check_outputs(peers, args)
    if problems:
        raise SystemExit(f"{name}: outputs differ from eager: {problems}")
    with torch.no_grad():
        times = time_interleaved(peers, args, rounds)
    return {"workload": name, "times": times, "counts": counts}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--quick", action="store_true", help="7 rounds, MLP only")
    opts = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(2)
    rounds = 7 if opts.quick else opts.rounds
    print(f"torch {torch.__version__}, {cpu_model()}, 2 threads, {rounds} interleaved rounds, medians")
    rows = [bench("MLP (3x Linear 64)", *build_mlp(), rounds)]
    if not opts.quick:
        rows.append(bench("BERT-base (12L, seq 128)", *build_bert(), rounds))
    print(f"| workload | eager us | {' | '.join(POLICIES)} | guards cost (True vs False) |")
    print("|---|---:|" + "---:|" * len(POLICIES) + "---:|")
    for r in rows:
        t = r["times"]
        cells = [f"{t[p] * 1e6:.1f} ({r['counts'][p]} guards)" for p in POLICIES]
        cost = (t["guards=True"] / t["guards=False"] - 1) * 100
        print(f"| {r['workload']} | {t['eager'] * 1e6:.1f} | {' | '.join(cells)} | {cost:+.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
