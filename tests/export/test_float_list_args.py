"""``interpolate(x, scale_factor=2, mode="bilinear")`` records ``upsample_bilinear2d.vec(x, None, align, [2, 2])``: the
``float[]`` scale factors as Python ints, which torch_lib wrote as an attribute and failed on ("Unsupported attribute
type: list": transformers' DPT and Depth Anything did not export, breadth27). Ints in a ``float[]`` parameter are
now floats (export/schema_args.py). Eager's answers on new shapes in onnxruntime."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit

ort = pytest.importorskip("onnxruntime")


class Up(nn.Module):
    def __init__(self, mode, align):
        super().__init__()
        self.mode, self.align = mode, align

    def forward(self, x):
        return nn.functional.interpolate(x, scale_factor=2, mode=self.mode, align_corners=self.align) * 3


@pytest.mark.parametrize("mode,align", [("bilinear", True), ("bilinear", False), ("nearest", None),
                                        ("bicubic", False)])
def test_integer_scale_factor_exports_with_eagers_answers(mode, align):
    model = Up(mode, align)
    proto = tracejit.export_onnx(tracejit.trace(model, torch.randn(1, 2, 4, 4)))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in ((1, 2, 4, 4), (3, 2, 7, 5)):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[2]))
        got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
