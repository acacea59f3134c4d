"""Helpers of the numpy-region tests (test_numpy_regions.py, test_numexpr_groups.py): build the
optimized program and torch.jit's trace of the same function, and find the graph that runs."""
from __future__ import annotations

import warnings

import torch

import tracejit


def ofi(fn, example):
    with torch.no_grad():
        return tracejit.optimize_for_inference(tracejit.trace(fn, example))


def jit(fn, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(fn, example)


def run_graph(traced):
    """The graph an optimized program runs (with its in-memory kernel nodes)."""
    return lowered(traced).graph


def lowered(traced):
    """The lowered program an optimized program runs: its graph and the kernels its kernel nodes call
    (passes/lowered.py)."""
    return traced.forward.lowered if isinstance(traced, torch.nn.Module) else traced._fn.lowered


def error_type(call):
    """The class of the exception ``call()`` raises, or None."""
    try:
        call()
    except Exception as e:  # noqa: BLE001
        return type(e)
    return None


def assert_eager_and_jit_answers(traced, model, ref, shapes, *, rtol, atol, scale=1.0):
    """``traced`` gives ``model``'s (eager) and ``ref``'s (torch.jit's trace) answers on a new input of
    each shape (``torch.randn(shape) * scale``), without autograd."""
    with torch.no_grad():
        for shape in shapes:
            x = torch.randn(shape) * scale
            got = traced(x)
            torch.testing.assert_close(got, model(x), rtol=rtol, atol=atol)
            torch.testing.assert_close(got, ref(x), rtol=rtol, atol=atol)
