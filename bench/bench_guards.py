"""Guard cost: per-call time of tracejit programs with and without guards.

Workloads: the MLP and BERT-base of bench_core.py (same builders, inputs and
methodology: warm-up, N calibrated once, interleaved rounds, medians). Peers:

* ``guards=True``     every guard the trace made (sizes, ranks, values, training flag)
* ``guards="shapes"`` only the guards that need no device sync
* ``guards=False``    no guards (the old behaviour; the training flag is still checked)

Also prints how many guards each program holds. Target (issue 10): guards add at
most 5% (MLP) and 1% (BERT) per call.

On a busy machine the per-call medians of whole programs move by more than the
guards cost, so a second, steadier number is printed too: the guards' own cost,
timed in isolation (each guard kind's ``if`` line against an empty function,
``timeit`` best of 5) times the number of guards of that kind, as a share of
the guards=False per-call median.

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


def guard_line_cost() -> dict:
    """Seconds per executed guard line, per guard kind (best of 5 timeit runs, minus an empty call)."""
    import timeit
    x = torch.randn(2, 3, 4, 5)
    lines = {"rank": "if x.dim() != 4: fail(0, x.dim())", "size": "if not (s > 1): fail(0, s)",
             "training": "if self.training: fail(0, self.training)", "length": "if len(x) != 2: fail(0, len(x))",
             "value": "if int(t) != 3: fail(0, int(t))",
             "meta": "if x.is_contiguous() != True: fail(0, x.is_contiguous())",
             "dtype": "if str(x.dtype) != 'torch.float32': fail(0, x.dtype)",
             "device": "if str(x.device) != 'cpu': fail(0, x.device)"}
    env = {"fail": None, "torch": torch}
    out = {}
    for kind, line in lines.items():
        src = f"def with_guard(self, x, s, t):\n    {line}\n    return x\ndef empty(self, x, s, t):\n    return x\n"
        exec(src, env)
        self_ = torch.nn.Identity().eval()
        args = (self_, x, 3, torch.tensor(3))
        n = 200_000
        a = min(timeit.repeat(lambda: env["with_guard"](*args), number=n, repeat=5)) / n
        b = min(timeit.repeat(lambda: env["empty"](*args), number=n, repeat=5)) / n
        out[kind] = max(a - b, 0.0)
    return out


def guard_kinds(traced) -> dict:
    fns = [fn for m in traced.modules() for fn in m._traced_methods.values()]
    kinds: dict = {}
    for fn in fns:
        for n in fn.graph.nodes:
            if n.op == "tracejit::guard":
                kinds[n.attrs["kind"]] = kinds.get(n.attrs["kind"], 0) + 1
    return kinds


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
    return {"workload": name, "times": times, "counts": counts, "kinds": guard_kinds(peers["guards=True"])}


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
    line_cost = guard_line_cost()
    print()
    print("guard line cost (ns): " + ", ".join(f"{k} {v * 1e9:.0f}" for k, v in line_cost.items()))
    print("| workload | guards by kind | guards' own time per call (us) | share of a guards=False call |")
    print("|---|---|---:|---:|")
    for r in rows:
        own = sum(line_cost.get(k, line_cost["value"]) * n for k, n in r["kinds"].items())
        share = own / r["times"]["guards=False"] * 100
        print(f"| {r['workload']} | {r['kinds']} | {own * 1e6:.2f} | {share:.3f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
