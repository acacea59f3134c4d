"""The settings of torch's modules that a trace froze (``LeakyReLU.negative_slope``, ``LayerNorm.eps``: held beside
the graph, ``Graph.memory_checks``, trace/module_config.py) changed after ``optimize_for_inference``: every backend
answers as eager does, or raises GuardError naming the setting where the original is gone. The program runs those
checks before every call; the backends that do not run the program (onnxruntime, OpenVINO, a CUDA graph replay) run
them too (backends/state_guards.py). Before session 35 all three gave the traced setting's answer, silently."""
from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
from torch import nn

import tracejit

from test_cuda_graphs import ReplayOnCpu

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")

BACKENDS = ["torch", "cuda_graphs"]
if importlib.util.find_spec("onnxruntime") is not None:
    BACKENDS.append("onnxruntime")
if importlib.util.find_spec("openvino") is not None:
    BACKENDS.append("openvino")


class Leaky(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.act = nn.Linear(4, 6), nn.LeakyReLU(0.1)

    def forward(self, x):
        return self.act(self.lin(x))


class Normed(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.norm = nn.Linear(4, 6), nn.LayerNorm(6, eps=1e-5)

    def forward(self, x):
        return self.norm(self.lin(x))


def _set_slope(m, value):
    m.act.negative_slope = value


def _set_eps(m, value):
    m.norm.eps = value


CASES = {"leaky_relu_slope": (Leaky, _set_slope, 0.1, 0.5, "negative_slope"),
         "layer_norm_eps": (Normed, _set_eps, 1e-5, 10.0, "eps")}


def _optimized(traced, backend):
    options = {"capturer": ReplayOnCpu} if backend == "cuda_graphs" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.optimize_for_inference(traced, backend=backend, **options)


def _x(seed):
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(seed)) * 4


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_a_changed_module_setting_gives_eagers_answer(case, backend):
    cls, set_value, traced_value, new_value, _ = CASES[case]
    torch.manual_seed(0)
    model = cls().eval()
    program = _optimized(tracejit.trace(model, (_x(0),)), backend)
    for seed in (1, 2):   # warm: a graph captured and replayed, a session run
        torch.testing.assert_close(program(_x(seed)), model(_x(seed)), rtol=1e-4, atol=1e-5)
    before = model(_x(3))
    set_value(model, new_value)
    want = model(_x(3))
    assert (want - before).abs().max() > 1e-2   # the setting moves the answer
    torch.testing.assert_close(program(_x(3)), want, rtol=1e-4, atol=1e-5)
    set_value(model, traced_value)
    torch.testing.assert_close(program(_x(4)), model(_x(4)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_the_original_a_changed_setting_raises_guard_error(backend):
    torch.manual_seed(0)
    model = Leaky().eval()
    traced = tracejit.trace(model, (_x(0),))
    traced.drop_original()
    program = _optimized(traced, backend)
    program(_x(1))
    program(_x(2))
    model.act.negative_slope = 0.5
    with pytest.raises(tracejit.GuardError, match="negative_slope"):
        program(_x(3))
