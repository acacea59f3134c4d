"""Call-time budget cost: per-call time of a program loaded from a file (with its size checks and
checked int arithmetic, support/call_budget.py) against the same program traced in this process
(trusted: no checks). Workloads: the MLP and BERT-base of bench_core.py (same builders, inputs and
methodology: warm-up, N calibrated once, interleaved rounds, medians). Target (issue 21): at most
5% (MLP) and 1% (BERT-base) per call.

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
from bench_core import build_bert, build_mlp, cpu_model, time_interleaved  # noqa: E402

import tracejit  # noqa: E402


def _codes(program) -> list[str]:
    if isinstance(program, tracejit.TracedFunction):
        return [program.code]
    return [fn.code for m in program.modules() for fn in m._traced_methods.values()]


def count_checks(program) -> int:
    """Lines of generated code that are budget checks (size checks, the input count, checked int ops)."""
    return sum(len(re.findall(r"_tj_budget\w*\(|_tj_int\.", code)) for code in _codes(program))


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
            torch.testing.assert_close(loaded(*inputs), traced(*inputs))
            med = time_interleaved({"traced": traced, "loaded": loaded}, inputs, args.rounds)
        n = count_checks(loaded)
        extra = (med["loaded"] - med["traced"]) / med["traced"] * 100
        print(f"{name}: traced {med['traced'] * 1e6:.1f} us, loaded {med['loaded'] * 1e6:.1f} us per call "
              f"({extra:+.2f}%), {n} budget check lines in the loaded program")
        if n:
            from tracejit.support.call_budget import enter_call, size_check
            from tracejit.serialize.size_rules import RULES
            x, w = torch.randn(1, 128, 768), torch.randn(3072, 768)
            check = size_check("aten::linear", RULES["linear"], 2 ** 25, "bench")
            per = min(timeit.repeat(lambda: check({"input": x, "weight": w, "bias": None}), number=10000,
                                    repeat=5)) / 10000
            entry = min(timeit.repeat(lambda: enter_call(*inputs), number=10000, repeat=5)) / 10000
            print(f"  one size check {per * 1e6:.2f} us, the inputs' count {entry * 1e6:.2f} us: at most "
                  f"{(n * per + entry) / med['traced'] * 100:.3f}% of a traced call")


if __name__ == "__main__":
    main()
