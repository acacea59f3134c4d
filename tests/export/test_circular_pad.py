"""``pad(x, p, mode="circular")`` (``Conv1d(padding_mode="circular")``: transformers' Informer distilling conv) exports as
slices concatenated (export/torch_lib_fixes.py), not torch_lib's ``Pad(mode="wrap")``, which ONNX has only from
opset 19 (the model is opset 18): OpenVINO's converter lost the rank and refused the model ("Conv ...
rank().is_static() failed"), so Informer had no OpenVINO backend (breadth27). Eager's answers on new shapes in
onnxruntime and OpenVINO."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit

ort = pytest.importorskip("onnxruntime")


class Circular(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv1d(4, 6, 3, padding=1, padding_mode="circular")

    def forward(self, x):
        return self.conv(x.permute(0, 2, 1)).relu() + nn.functional.pad(x, (2, 1), mode="circular")[..., :6, :].sum()


def _x(b, n):
    return torch.randn(b, n, 4, generator=torch.Generator().manual_seed(b * 10 + n))


def test_circular_pad_is_opset_18_and_gives_eagers_answers():
    model = Circular().eval()
    proto = tracejit.export_onnx(tracejit.trace(model, _x(1, 8)))
    assert not any(n.op_type == "Pad" and any(a.s == b"wrap" for a in n.attribute) for n in proto.graph.node)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        for b, n in ((1, 8), (3, 13)):
            got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: _x(b, n).numpy()})[0])
            torch.testing.assert_close(got, model(_x(b, n)), rtol=1e-5, atol=1e-5)


def test_openvino_runs_a_circular_conv():
    pytest.importorskip("openvino")
    model = Circular().eval()
    with torch.no_grad():
        program = tracejit.optimize_for_inference(tracejit.trace(model, _x(1, 8)), backend="openvino")
        for b, n in ((1, 8), (3, 13)):
            torch.testing.assert_close(program(_x(b, n)), model(_x(b, n)), rtol=1e-5, atol=1e-5)
        assert program.handed_over == 0
