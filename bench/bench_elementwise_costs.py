"""Measure the cost table of tracejit/kernels/elementwise_costs.py on this machine (one thread).

For every elementwise op a numpy kernel runs, times at 64 and 4096 float32 elements: a one-node numexpr
program, the op as a one-step numpy kernel (kernels/numpy_kernel.py, ufunc path) and as torch ops (the
kernel's fallback path); prints the fixed cost per call (at 64 elements) and the cost per element (the
slope), next to the table's numbers. Best of many short batches: run it on a quiet machine.

Usage::

    python bench/bench_elementwise_costs.py
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tracejit.kernels import numexpr_groups  # noqa: E402
from tracejit.kernels.elementwise_costs import PER_ELEMENT_NS  # noqa: E402
from tracejit.kernels.numpy_kernel import NumpyKernel  # noqa: E402

SIZES = (64, 4096)


def best_ns(fn, n=100, reps=40) -> float:
    for _ in range(10):
        fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e9


def main() -> int:
    torch.set_num_threads(1)
    if not numexpr_groups.available():
        print("numexpr is not installed")
        return 1
    import numexpr
    from numexpr import expressions
    numexpr.set_num_threads(1)
    print("| op | numexpr call us | kernel call us | torch call us | numexpr ns/el | numpy ns/el | torch ns/el "
          "| table (torch, numpy, numexpr) |")
    print("|---" * 8 + "|")
    for op in sorted(numexpr_groups.EXPR):
        builder = numexpr_groups.EXPR[op][0]
        scalars = (1.5, 2.5)[:builder.__code__.co_argcount - 1]
        x = expressions.VariableNode("x0", "float")
        program = numexpr.NumExpr(builder(x, *(expressions.ConstantNode(np.float32(s)) for s in scalars)),
                                  [("x0", float)], optimization="none")
        kernel = NumpyKernel([(op, [("in", 0)] + [("s", s) for s in scalars], False)], 1, [], [0])
        fallback = kernel.function.__globals__["_fallback"]
        times = {}
        for size in SIZES:
            t = torch.rand(size) + 0.25
            a = t.numpy()
            times[size] = (best_ns(lambda: program(a)), best_ns(lambda: kernel(t)), best_ns(lambda: fallback(t)))
        slope = [(times[SIZES[1]][i] - times[SIZES[0]][i]) / (SIZES[1] - SIZES[0]) for i in range(3)]
        calls = " | ".join(f"{v / 1e3:.2f}" for v in times[SIZES[0]])
        print(f"| {op} | {calls} | " + " | ".join(f"{s:.2f}" for s in slope) + f" | {PER_ELEMENT_NS.get(op)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
