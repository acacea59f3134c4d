"""Ops whose torch_lib conversion gave another answer than eager on edge values (export/edge_values.py):
the exported program must give eager's and torch.jit.trace's answers in onnxruntime and OpenVINO, on the
edge inputs and on new shapes.

Not covered: OpenVINO's CPU Max / Min / Clip / Relu turn NaN into a number (a limit of that runtime, not of
the conversion), so the clamp cases carry infinities but no NaN.
"""
from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

import tracejit

from backend_check import assert_backends_match

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")

INF, NAN = float("inf"), float("nan")


def _t(*values):
    return torch.tensor(values, dtype=torch.float32)


def _randn(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def _check_nan(fn, example, new_inputs, what):
    """NaN where eager has NaN."""
    assert_backends_match(fn, example, new_inputs, what, equal_nan=True)


EDGE = _t(INF, -INF, -0.0, 0.0, 0.25, 0.5, 1.5, -2.5, 3e38, -3e38)


@pytest.mark.parametrize("fn", [lambda x: x.clamp(min=0.5), lambda x: torch.clamp_min(x, 0.5),
                                lambda x: x.clamp(max=0.5), lambda x: torch.clamp_max(x, -1),
                                lambda x: torch.clip(x, min=-1.0)],
                         ids=["clamp-min", "clamp_min", "clamp-max", "clamp_max", "clip-min"])
def test_clamp_with_one_bound_keeps_infinities(fn):
    """torch_lib's Clip without its other bound clamped inf to 3.4e38 in both runtimes."""
    assert fn(EDGE).isinf().sum() == 1   # the case is real: one infinity survives in eager
    _check_nan(fn, (EDGE,), [(_randn(13, scale=1e3),), (EDGE.flip(0)[:3],)], "clamp one bound")


def test_clamp_with_a_tensor_bound_keeps_infinities_and_takes_each_bound():
    """A bound per element: onnxruntime refused torch_lib's Clip (not a scalar); OpenVINO clamped inf."""
    def f(x, lo):
        return torch.clamp(x, min=lo)

    def g(x, lo, hi):
        return torch.clamp(x, lo, hi)
    lo = _t(0, 0, 0, 0, 1, -1, INF, -INF, 0, 0)
    assert f(EDGE, lo)[6] == INF and f(EDGE, lo)[0] == INF
    _check_nan(f, (EDGE, lo), [(_randn(7), _randn(7, seed=1))], "clamp tensor min")
    hi = lo + 0.5
    _check_nan(g, (EDGE, lo, hi), [(_randn(7), _randn(7, seed=1), _randn(7, seed=2))], "clamp tensor min max")


def test_log_sigmoid_of_large_negative_inputs():
    """torch_lib's log(sigmoid(x)): onnxruntime gave -14.84 for eager's -15 and -inf from x = -20;
    both runtimes -inf from x = -88. Eager gives x there."""
    x = _t(-100, -88, -30, -20, -15, -1, 0, 1, 20, 100, INF, -INF)
    eager = F.logsigmoid(x)
    assert eager[0] == -100 and eager[4] == -15   # the case is real: finite, close to x
    _check_nan(F.logsigmoid, (x,), [(_randn(15, scale=60),), (_t(NAN, -50),)], "log_sigmoid")


def test_sign_of_nan_is_zero_as_in_eager():
    x = _t(NAN, -2, -0.0, 0, 3, INF, -INF)
    assert torch.sign(x)[0] == 0   # eager's answer for NaN, where ONNX's Sign gives NaN
    _check_nan(torch.sign, (x,), [(_t(NAN, NAN),), (_randn(6),)], "sign")
    _check_nan(torch.sign, (torch.tensor([-3, 0, 5]),), [(torch.tensor([7, -1]),)], "sign int")


@pytest.mark.parametrize("fn", [lambda x: x.mean(dim=1), lambda x: x.mean(), lambda x: x.mean(-1, keepdim=True),
                                lambda x: torch.mean(x, (0, 1))],
                         ids=["dim", "all", "keepdim", "dims"])
def test_mean_over_an_axis_that_is_empty_in_a_call(fn):
    """A dynamic axis of size 0: eager's mean is NaN (0 / 0), ReduceMean gave 0 (and onnxruntime dropped
    the kept axis)."""
    empty = torch.zeros(3, 0)
    assert fn(empty).numel() > 0 and fn(empty).isnan().all()   # the case is real
    _check_nan(fn, (_randn(2, 5),), [(empty,), (torch.zeros(0, 4),), (_randn(4, 3, seed=1),)], "mean")


def test_mean_keeps_reduce_mean_over_a_known_size_and_gives_nan_over_an_empty_axis():
    """Where the graph knows the reduced size (RMSNorm after a Linear) the export keeps ReduceMean, the form
    runtimes fuse; the mean over the input's dynamic axis is a sum over a count, NaN when the axis is empty."""
    class RMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 6)

        def forward(self, x):
            h = self.proj(x)
            return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6), x.mean(1)
    model = RMSNorm().eval()
    traced = tracejit.trace(model, (_randn(2, 3, 4),))
    kinds = [n.op_type for n in tracejit.export_onnx(traced).graph.node]
    assert kinds.count("ReduceMean") == 1 and kinds.count("ReduceSum") == 1
    assert model(torch.zeros(2, 0, 4))[1].isnan().all()
    _check_nan(model, (_randn(2, 3, 4),), [(_randn(1, 5, 4, seed=1),), (torch.zeros(2, 0, 4),)], "RMSNorm")
