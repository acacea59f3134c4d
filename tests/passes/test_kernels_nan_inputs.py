"""oneDNN's fused relu / clip turn NaN into a number (relu(NaN) == 0); eager keeps NaN. Programs
with such kernels check their float32 CPU inputs per call and run the unoptimized program for
NaN / inf (backends/fallback.py): eager's answer, NaN where eager has NaN."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _optimized(model, example):
    with torch.no_grad():
        return tracejit.optimize_for_inference(tracejit.trace(model.eval(), example))


def _poisoned(*shape, seed=0):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    x.view(-1)[5] = float("nan")
    x.view(-1)[-3] = float("inf")
    return x


class Block(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.conv, self.conv2, self.act = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3, padding=1), act

    def forward(self, x):
        h = self.act(self.conv(x))
        return torch.relu(self.conv2(h) + h)   # the residual add + relu kernel too


@pytest.mark.parametrize("act", [nn.ReLU(), nn.ReLU6(), nn.Hardsigmoid()], ids=["relu", "relu6", "hardsigmoid"])
def test_conv_kernels_keep_eager_nan(act, monkeypatch):
    monkeypatch.setattr("tracejit.passes.conv_kernels.MIN_DENSE_MACS", 0)   # fuse these small convs too
    model = Block(act).eval()
    program = _optimized(model, (torch.randn(1, 3, 10, 10),))
    assert program.forward.finite_inputs   # the program has NaN-dropping kernels
    with torch.no_grad():
        for x in (_poisoned(1, 3, 10, 10), _poisoned(2, 3, 12, 9, seed=1)):
            want = model(x)
            assert want.isnan().any()   # the case is real
            got = program(x)
            torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-4, atol=1e-5)
        clean = torch.randn(2, 3, 12, 9)
        torch.testing.assert_close(program(clean), model(clean), rtol=1e-4, atol=1e-5)


def test_large_linear_relu_keeps_eager_nan(monkeypatch):
    monkeypatch.setattr("tracejit.passes.linear_timing.MEASURE", False)   # oneDNN's linear + relu whatever it costs
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).eval()
    program = _optimized(model, (torch.randn(64, 256),))
    assert program.forward.finite_inputs
    x = _poisoned(64, 256)
    with torch.no_grad():
        assert model(x).isnan().any()
        torch.testing.assert_close(program(x), model(x), equal_nan=True, rtol=1e-4, atol=1e-4)


def test_finite_inputs_still_run_the_fused_kernels(monkeypatch):
    monkeypatch.setattr("tracejit.passes.conv_kernels.MIN_DENSE_MACS", 0)   # fuse these small convs too
    model = Block(nn.ReLU()).eval()
    program = _optimized(model, (torch.randn(1, 3, 10, 10),))
    calls = []
    real = torch.ops.mkldnn._convolution_pointwise

    class Spy:
        def __call__(self, *a, **k):
            calls.append(1)
            return real(*a, **k)

        def __getattr__(self, name):   # .binary
            fn = getattr(real, name)
            return lambda *a, **k: (calls.append(1), fn(*a, **k))[1]
    monkeypatch.setattr(torch.ops.mkldnn, "_convolution_pointwise", Spy())
    with torch.no_grad():
        program(torch.randn(1, 3, 10, 10))
        assert len(calls) == 2
        program(_poisoned(1, 3, 10, 10))
        assert len(calls) == 2   # the NaN call ran the unoptimized program


def test_kernels_that_keep_nan_need_no_check():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.SiLU(), nn.Conv2d(8, 4, 3), nn.GELU()).eval()
    program = _optimized(model, (torch.randn(1, 3, 10, 10),))
    assert not program.forward.finite_inputs
    x = _poisoned(1, 3, 10, 10)
    with torch.no_grad():
        torch.testing.assert_close(program(x), model(x), equal_nan=True, rtol=1e-4, atol=1e-5)


def test_a_moved_program_and_functions():
    model = Block(nn.ReLU()).eval()
    program = _optimized(model, (torch.randn(1, 3, 10, 10),)).double()
    x = _poisoned(1, 3, 10, 10).double()
    with torch.no_grad():
        torch.testing.assert_close(program(x), model.double()(x), equal_nan=True)
    w, b = torch.randn(8, 3, 3, 3), torch.randn(8)

    def f(x):
        return torch.relu(torch.conv2d(x, w, b))
    with torch.no_grad():
        fn = tracejit.optimize_for_inference(tracejit.trace(f, (torch.randn(1, 3, 8, 8),)))
        x = _poisoned(1, 3, 8, 8)
        torch.testing.assert_close(fn(x), f(x), equal_nan=True, rtol=1e-4, atol=1e-5)


def test_huge_finite_inputs_whose_sum_overflows_still_give_eager_answers():
    model = Block(nn.ReLU()).eval()
    program = _optimized(model, (torch.randn(1, 3, 10, 10),))
    x = torch.full((1, 3, 10, 10), 3e37)
    x[0, 0, 0, 0] = -3e37
    assert not torch.isfinite(x.sum())   # the check's sum overflows: the exact path runs
    with torch.no_grad():
        torch.testing.assert_close(program(x), model(x), equal_nan=True, rtol=1e-4, atol=0)
