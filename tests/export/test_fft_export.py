"""``torch.fft.fftn`` of a real tensor read through ``.real`` (transformers' FNet: ``fftn(hidden, dim=(1, 2)).real``)
exports as float64 ``DFT``s on (real, imaginary) pairs (export/fft.py). Before: "no ONNX conversion for ATen op
'aten::fft_fftn.default'" (FNet had no ONNX backend, breadth27). Checked against float64: the file's answer is at
least as close as eager's on new shapes; a complex result read otherwise (``abs``) is refused by name."""
from __future__ import annotations

import pytest
import torch

import tracejit
from tracejit.export.errors import ExportError

ort = pytest.importorskip("onnxruntime")


def mixing(x):
    return torch.fft.fftn(x, dim=(1, 2)).real * 2 + torch.fft.fftn(x, dim=(-1,)).imag


def _run(proto, x):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


def test_fftn_real_part_is_as_close_to_float64_as_eager():
    proto = tracejit.export_onnx(tracejit.trace(mixing, torch.randn(2, 6, 8)))
    for shape in ((2, 6, 8), (3, 16, 7), (1, 24, 64)):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[1]))
        exact = mixing(x.double())
        got, eager = _run(proto, x), mixing(x)
        assert got.dtype == torch.float32 and got.shape == eager.shape
        assert (got.double() - exact).abs().max() <= (eager.double() - exact).abs().max() * 1.5 + 1e-6


def test_a_complex_result_read_otherwise_is_refused():
    traced = tracejit.trace(lambda x: torch.fft.fftn(x, dim=(1,)).abs(), torch.randn(2, 6))
    with pytest.raises(ExportError, match=r"read other than by \.real / \.imag"):
        tracejit.export_onnx(traced)
