"""NaN / inf inputs to the ONNX backends give eager's answer: a program holding an op its runtime
computes differently on them (OpenVINO: every op; onnxruntime: max_pool, sort, ...) runs the traced
program for a call with a non-finite float input (backends/fallback.py: with_finite_check)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit

from backend_check import BACKENDS, closure

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


def test_the_model_sums_its_float_inputs_and_the_call_reads_them_after_the_run():
    """The check is the model's own output (backends/input_sums.py): one sum per floating-point input, after the
    program's outputs; no torch call wraps the run. An integer input gets no sum."""
    def f(x, idx):
        return nn.functional.max_pool1d(x, 2).gather(-1, idx)
    x, idx = torch.randn(2, 3, 8), torch.zeros(2, 3, 2, dtype=torch.long)
    with torch.no_grad():
        program = tracejit.optimize_for_inference(tracejit.trace(f, (x, idx)), backend="onnxruntime")
    outputs = [o.name for o in program.session.get_outputs()]
    assert outputs[-1] == "tracejit_input_sum_0" and len(outputs) == 2   # x only: idx is an integer tensor
    assert program._call.__name__ != "checked" and program._n_sums == 1
    for scale in (1.0, 3.0):   # new values and a new batch: the answer is eager's
        y, j = torch.randn(4, 3, 10) * scale, torch.randint(0, 5, (4, 3, 2))
        j[0, 0, 0] = 3   # reads the pooled window of y's element 7
        torch.testing.assert_close(program(y, j), f(y, j))
        y.view(-1)[7] = float("nan")
        assert f(y, j).isnan().any()
        torch.testing.assert_close(program(y, j), f(y, j), equal_nan=True)
        y.view(-1)[7] = -float("inf")
        torch.testing.assert_close(program(y, j), f(y, j), equal_nan=True)


def test_input_sums_cover_keyword_nested_and_double_inputs():
    """The general call path (keyword and tuple arguments) and a float64 input: each leaf is summed, in its
    own dtype, and a NaN in any of them runs the traced program."""
    def f(pair, *, w):
        a, b = pair
        return torch.sort(a * w, dim=-1)[0] + b
    a, b, w = torch.randn(2, 5), torch.randn(2, 5), torch.randn(5, dtype=torch.float64)
    with torch.no_grad():
        program = tracejit.optimize_for_inference(tracejit.trace(f, ((a, b),), example_kwarg_inputs={"w": w}), backend="onnxruntime")
    assert program._n_sums == 3
    for k in range(3):
        args = [torch.randn(2, 5), torch.randn(2, 5), torch.randn(5, dtype=torch.float64)]
        torch.testing.assert_close(program((args[0], args[1]), w=args[2]), f((args[0], args[1]), w=args[2]))
        args[k].view(-1)[1] = float("nan")
        want = f((args[0], args[1]), w=args[2])
        assert want.isnan().any()
        torch.testing.assert_close(program((args[0], args[1]), w=args[2]), want, equal_nan=True)


def test_a_sum_that_overflows_only_costs_the_safe_path():
    """Finite values whose float32 sum overflows to inf: the traced program answers, with eager's values."""
    model = ConvPool().eval()
    program = _program(model, (torch.randn(1, 3, 10, 10),), "onnxruntime")
    x = torch.full((1, 3, 10, 10), 3e37)
    with torch.no_grad():
        assert torch.isfinite(x).all() and not torch.isfinite(x.sum())
        torch.testing.assert_close(program(x), model(x))


def test_a_model_without_input_sums_is_checked_in_torch(monkeypatch):
    """Where the model cannot sum its inputs (an input type input_sums.py lists nowhere: it adds none), the
    arguments are checked in torch before the run, as before (default-deny)."""
    from tracejit.backends import onnx_call
    monkeypatch.setattr(onnx_call, "add_input_sums", lambda proto: 0)
    model = ConvPool().eval()
    program = _program(model, (torch.randn(1, 3, 10, 10),), "onnxruntime")
    assert program._n_sums == 0 and closure(program).__name__ == "checked"
    x = _poisoned(2, 3, 12, 9)
    with torch.no_grad():
        torch.testing.assert_close(program(x), model(x), equal_nan=True, rtol=1e-4, atol=1e-5)


def test_integer_inputs_alone_need_no_check():
    """A model whose inputs are all integers (token ids: no NaN can come in) gets neither sums nor the torch
    check, though it holds an op onnxruntime computes otherwise on NaN (gelu); its answers are eager's."""
    f = nn.Sequential(nn.Embedding(10, 6), nn.GELU()).eval()
    with torch.no_grad():
        program = tracejit.optimize_for_inference(tracejit.trace(f, (torch.randint(0, 10, (2, 5)),)),
                                                  backend="onnxruntime")
        assert program._n_sums == 0 and not program._finite_in_torch and program._call.__name__ != "checked"
        for shape in ((2, 5), (3, 7)):
            ids = torch.randint(0, 10, shape)
            torch.testing.assert_close(program(ids), f(ids))
