"""A guard on a value computed from the program's constants alone holds at every call, so export keeps the
model (tracejit/export/guards.py): torchvision's FPN pooler reads ``float(torch.tensor(scale).log2())``
of a scale its size guards already pinned, which refused Faster R-CNN's export unless value guards were
dropped (``guards="shapes"``). A value read of anything an input reaches is still refused."""
from __future__ import annotations

import math

import pytest
import torch

import tracejit
from backend_check import assert_backends_match
from tracejit.export.errors import ExportError

pytest.importorskip("onnxruntime")


class LevelScale(torch.nn.Module):
    """The pooler's pattern: a level read in Python from a constant tensor, then used as a number."""

    def __init__(self):
        super().__init__()
        self.register_buffer("base", torch.tensor(0.25))

    def forward(self, x):
        level = float(torch.tensor(0.125).log2().round())     # from a constant
        shift = self.base.mul(4).item()                        # from a buffer (a constant of the export)
        return x * 2 ** level + shift


def test_value_reads_of_constants_export_and_give_eager_answer():
    model = LevelScale().eval()
    example, new = (torch.randn(2, 3),), [(torch.randn(5, 3),), (torch.randn(1, 3),)]
    traced = tracejit.trace(model, example)
    assert sum(n.attrs.get("kind") == "value" for n in traced.graph.nodes if n.op == "tracejit::guard") == 2
    torch.testing.assert_close(model(*new[0]), new[0][0] * 2 ** math.log2(0.125) + 1.0)
    assert_backends_match(model, example, new, "value reads of constants")


def test_a_value_read_an_input_reaches_is_still_refused():
    def fn(x):
        return x * float(x.sum().round())

    with pytest.raises(ExportError, match=r"tensor values \(float\(tensor\) in `return x \* float.*computed from "
                                          r"input .x.*test_constant_guards\.py:\d+"):
        tracejit.export_onnx(tracejit.trace(fn, torch.randn(3)))
