"""NaN / inf inputs to the ONNX backends give eager's answer: a program holding an op its runtime
computes differently on them (OpenVINO: every op; onnxruntime: max_pool, sort, ...) runs the traced
program for a call with a non-finite float input (backends/fallback.py: with_finite_check)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit

from backend_check import BACKENDS

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _poisoned(*shape, seed=0):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    x.view(-1)[3] = float("nan")
    x.view(-1)[-2] = float("inf")
    return x


class ConvPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return nn.functional.max_pool2d(torch.relu(self.conv(x)), 2).clamp(max=5.0)


def _program(model, example, backend):
    with torch.no_grad():
        return tracejit.optimize_for_inference(tracejit.trace(model, example), backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_and_inf_inputs_give_eager_answers(backend):
    model = ConvPool().eval()
    program = _program(model, (torch.randn(1, 3, 10, 10),), backend)
    with torch.no_grad():
        for x in (_poisoned(1, 3, 10, 10), _poisoned(2, 3, 12, 9, seed=1)):
            want = model(x)
            assert want.isnan().any()   # the case is real
            torch.testing.assert_close(program(x), want, equal_nan=True, rtol=1e-4, atol=1e-5)
        clean = torch.randn(2, 3, 12, 9)
        torch.testing.assert_close(program(clean), model(clean), rtol=1e-4, atol=1e-5)


def test_sort_with_nan_in_onnxruntime():
    def f(x):
        return torch.sort(x, dim=-1)[0]
    with torch.no_grad():
        program = tracejit.optimize_for_inference(tracejit.trace(f, (torch.randn(2, 6),)), backend="onnxruntime")
        x = _poisoned(2, 6)
        torch.testing.assert_close(program(x), f(x), equal_nan=True)
        assert f(x)[0].isnan()[-1]   # eager sorts NaN as the largest


@pytest.mark.skipif("openvino" not in BACKENDS, reason="openvino is not installed")
def test_openvino_relu_and_exp_keep_nan():
    model = nn.Sequential(nn.Linear(6, 6), nn.ReLU()).eval()
    program = _program(model, (torch.randn(2, 6),), "openvino")
    x = _poisoned(3, 6)
    with torch.no_grad():
        assert model(x).isnan().any()
        torch.testing.assert_close(program(x), model(x), equal_nan=True, rtol=1e-4, atol=1e-5)


def test_onnxruntime_programs_without_such_ops_skip_the_check():
    model = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2)).eval()
    program = _program(model, (torch.randn(2, 6),), "onnxruntime")
    assert program._call.__name__ != "checked"   # the fast call, no per-call sum
    x = _poisoned(3, 6)
    with torch.no_grad():
        torch.testing.assert_close(program(x), model(x), equal_nan=True)   # onnxruntime's relu keeps NaN
