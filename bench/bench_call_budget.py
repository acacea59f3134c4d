"""Call-time budget cost: per-call time of a program loaded from a file (with its size checks and
checked int arithmetic, support/call_budget.py) against the same program traced in this process
(trusted: no checks), and against the same file loaded with the checks switched off (a bench-only
switch: the code generator's budget hooks patched out while it loads), so the difference is the checks
alone. Workloads: the MLP and BERT-base of bench_core.py (same builders, inputs and methodology: warm-up,
N calibrated once, interleaved rounds, medians and minima). Target (issue 21): at most 5% (MLP) and 1%
(BERT-base) per call.

Also prints how many checks each loaded program runs per call and their own cost, timed in isolation
(each check against its op's inputs, best of 5), as a share of the traced program's median: the
steadier number on a busy machine.

Usage::

    python bench/bench_call_budget.py [--rounds R]
"""
from __future__ import annotations

import argparse
import io
import os
import re
import sys
import timeit
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_core import WARMUP_CALLS, build_bert, build_mlp, cpu_model  # noqa: E402

import tracejit  # noqa: E402


def _codes(program) -> list[str]:
    if isinstance(program, tracejit.TracedFunction):
        return [program.code]
    return [fn.code for m in program.modules() for fn in m._traced_methods.values()]


def count_checks(program) -> int:
    """Lines of generated code that are budget checks (size checks, the input count, checked int ops)."""
    return sum(len(re.findall(r"_tj_budget\w*\(|_tj_int\.", code)) for code in _codes(program))


def load_unchecked(raw: bytes):
    """The file loaded with no budget checks (bench only): the code generator's hooks return nothing. The
    code cache is off for this load: a hit would hand back the checked code of the checked load."""
    from unittest import mock
    from tracejit.codegen import budget_emit
    with mock.patch.object(budget_emit, "before_node", lambda gen, node: None), \
            mock.patch.object(budget_emit, "int_op_expr", lambda gen, node: None), \
            mock.patch.object(budget_emit, "enter_line", lambda gen: None), \
            mock.patch.dict(os.environ, {"TRACEJIT_CACHE_DIR": ""}):
        return tracejit.load(io.BytesIO(raw))


def time_peers(peers: dict, args: tuple, rounds: int) -> dict:
    """{peer: (median, min, 10th percentile)} seconds per call over interleaved rounds of short batches
    (about 2 ms, or one call): on a loaded machine a short batch often runs undisturbed, so the minimum and
    low percentiles show the checks' cost where whole-call medians move by more than it. A fast program
    gets 20 times the rounds."""
    for fn in peers.values():
        for _ in range(WARMUP_CALLS):
            fn(*args)
    first = next(iter(peers.values()))
    est = timeit.timeit(lambda: first(*args), number=3) / 3
    n = max(1, int(0.002 / est))
    rounds = rounds * 20 if est < 1e-3 else rounds
    samples = {name: [] for name in peers}
    for _ in range(rounds):
        for name, fn in peers.items():
            samples[name].append(timeit.timeit(lambda: fn(*args), number=n) / n)
    return {name: (sorted(v)[len(v) // 2], min(v), sorted(v)[len(v) // 10]) for name, v in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"cpu: {cpu_model()}, torch {torch.__version__}, 1 thread")
    for name, build in (("MLP", build_mlp), ("BERT-base", build_bert)):
        model, inputs = build()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            traced = tracejit.trace(model, inputs)
            buf = io.BytesIO()
            tracejit.save(traced, buf)
            loaded = tracejit.load(io.BytesIO(buf.getvalue()))
            unchecked = load_unchecked(buf.getvalue())
            assert count_checks(unchecked) == 0
            torch.testing.assert_close(loaded(*inputs), traced(*inputs))
            torch.testing.assert_close(unchecked(*inputs), traced(*inputs))
            t = time_peers({"traced": traced, "unchecked": unchecked, "loaded": loaded}, inputs, args.rounds)
        n = count_checks(loaded)
        print(f"{name}: {n} budget check lines in the loaded program; per call, median / min / 10th percentile "
              f"of interleaved rounds:")
        for peer, (med, best, p10) in t.items():
            print(f"  {peer:9s} {med * 1e6:9.1f} us / {best * 1e6:9.1f} us / {p10 * 1e6:9.1f} us")
        for what, i in (("median", 0), ("min", 1), ("p10", 2)):
            base = t["unchecked"][i]
            print(f"  checks ({what}): {(t['loaded'][i] - base) * 1e6:+.2f} us = "
                  f"{(t['loaded'][i] - base) / base * 100:+.2f}% of the unchecked call")
        med = {"traced": t["traced"][0]}
        if n:
            from tracejit.support.call_budget import Allowance, enter_call, size_check
            from tracejit.serialize.size_rules import RULES
            x, w = torch.randn(1, 128, 768), torch.randn(3072, 768)
            check = size_check("aten::linear", RULES["linear"], 2 ** 25, "bench")
            allow = Allowance(10 ** 12, ((1, 128, 768),), 2 ** 25, 10 ** 8)   # a call's work allowance (round 27)

            def one_check():   # each in a call of its own: 10,000 in one call would pass the call's total
                enter_call(allow, x)
                check({"input": x, "weight": w, "bias": None})
            entry = min(timeit.repeat(lambda: enter_call(allow, x), number=10000, repeat=5)) / 10000
            per = min(timeit.repeat(one_check, number=10000, repeat=5)) / 10000 - entry
            print(f"  one size check {per * 1e6:.2f} us, the inputs' count {entry * 1e6:.2f} us: at most "
                  f"{(n * per + entry) / med['traced'] * 100:.3f}% of a traced call")


if __name__ == "__main__":
    main()
