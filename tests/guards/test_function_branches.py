"""A custom autograd Function whose forward branches on a value (hunt26).

In memory a traced program calls the Function as itself (its backward runs), skipping the forward's recorded ops;
a guard made inside that forward (``if x.max() > 0:``) compared a value the program no longer computes, so
tracing crashed in the code generator (KeyError). Now such guards are not emitted in memory (the forward runs
live, its branch is eager's) and stay in the graph for a saved file, which runs the recorded ops and raises
GuardError naming the line for an input that takes the other branch.
"""
from __future__ import annotations

import inspect
import io

import pytest
import torch

import tracejit
from trace_testlib import marker_lines

LINE = marker_lines(inspect.getsourcefile(inspect.currentframe()))


class ClampOrNegate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if x.max() > 0:  # @branch
            return x.clamp(min=0)
        return -x

    @staticmethod
    def backward(ctx, g):
        return g


def apply_it(x):
    return ClampOrNegate.apply(x) * 2


def test_a_value_branch_inside_a_function_forward_traces_and_follows_eager():
    x, other = torch.tensor([1.0, -2.0, 3.0]), torch.tensor([-1.0, -2.0, -3.0])
    traced = tracejit.trace(apply_it, (x,), check_trace=False)
    optimized = tracejit.optimize_for_inference(traced)
    jit = torch.jit.trace(apply_it, (x,), check_trace=False)   # a PythonOp: torch runs the Function itself
    torch.testing.assert_close(jit(other), apply_it(other))
    for program in (traced, optimized):
        torch.testing.assert_close(program(other), apply_it(other))
        torch.testing.assert_close(program(x), apply_it(x))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    torch.testing.assert_close(loaded(x), apply_it(x))
    with pytest.raises(tracejit.GuardError) as err:
        loaded(other)
    assert err.value.source is not None and err.value.source.lineno == LINE("branch")
