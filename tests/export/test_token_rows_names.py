"""The onnxruntime backend computes transformer rows as matrices (export/token_rows.py). A value read both as a row
input (a layer norm of it) and as a constant operand (a residual add of it) got the name ``<name>_rows`` twice, a
Reshape's output and an initializer, when it folds to a constant at the traced sizes (Perceiver's latents
``self.latents.expand(batch, -1, -1)``): onnxruntime refused the backend's model, "Duplicate definition of name
(v_Expand_7_rows)", and ``optimize_for_inference(backend="onnxruntime")`` failed (breadth27). Eager's answers on the
traced and a new shape."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit

pytest.importorskip("onnxruntime")


class Latents(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.latents, self.norm = nn.Parameter(torch.randn(4, 16)), nn.LayerNorm(16)
        self.l1, self.l2, self.l3 = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        lat = self.latents.expand(x.shape[0], -1, -1)
        h = self.l3(self.l2(torch.relu(self.l1(self.norm(lat)))) + lat)
        return torch.softmax(h @ x.transpose(1, 2), -1) @ x


def test_a_value_read_as_rows_and_as_a_constant_gets_distinct_names():
    model = Latents().eval()
    with torch.no_grad():
        program = tracejit.optimize_for_inference(tracejit.trace(model, torch.randn(2, 5, 16)), backend="onnxruntime")
        for shape in ((2, 5, 16), (3, 7, 16)):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[1]))
            torch.testing.assert_close(program(x), model(x), rtol=1e-5, atol=1e-5)
        assert program.handed_over == 0
