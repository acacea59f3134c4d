"""Strided inputs (channels_last, a slice, an expanded view, a transpose) to the exported backends.

OpenVINO's program copied a strided input to a C-contiguous array and handed the runtime a tensor sharing that
copy's memory without keeping the copy: freed before the run, it read whatever memory was there, and the answer was
silently wrong (a conv net on a channels_last image). Each answer here is eager's, call after call.
"""
from __future__ import annotations

import pytest
import torch

import tracejit

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval()


STRIDED = {
    "channels_last": lambda: torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last),
    "slice": lambda: torch.randn(2, 3, 8, 16)[..., ::2],
    "expanded": lambda: torch.randn(1, 3, 8, 8).expand(4, 3, 8, 8),
    "transposed": lambda: torch.randn(2, 3, 8, 8).transpose(2, 3),
}


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_strided_inputs_give_eagers_answer(backend):
    pytest.importorskip(backend)
    model = _net()
    program = tracejit.optimize_for_inference(tracejit.trace(model, (torch.randn(2, 3, 8, 8),)), backend=backend)
    with torch.no_grad():
        for _ in range(3):   # fresh allocations between calls: freed memory gets reused
            for name, make in STRIDED.items():
                x = make()
                assert not x.is_contiguous()
                want = model(x)
                torch.testing.assert_close(program(x), want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
                _ = [torch.randn(2, 3, 8, 8) for _ in range(4)]


def two_inputs(x, w):
    return (x @ w).relu() + x.sum(-1, keepdim=True)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_one_strided_input_among_contiguous_ones(backend):
    pytest.importorskip(backend)
    program = tracejit.optimize_for_inference(tracejit.trace(two_inputs, (torch.randn(3, 4), torch.randn(4, 5))),
                                              backend=backend)
    for _ in range(3):
        x, w = torch.randn(3, 4), torch.randn(5, 4).t()   # w: a transpose
        torch.testing.assert_close(program(x, w), two_inputs(x, w), rtol=1e-4, atol=1e-5)
        _ = [torch.randn(5, 4) for _ in range(4)]
