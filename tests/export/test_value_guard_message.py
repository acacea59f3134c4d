"""The refusal of a value guard says what was read, where, what it gave and which inputs it depends on: a data
dependence (Longformer's ``is_index_global_attn.flatten().any().item()``, from ``attention_mask``) is told apart from a
size or a parameter. Before, the message said only "(tensor.item())" and the file:line."""
from __future__ import annotations

import pytest
import torch

import tracejit
from tracejit.export.errors import ExportError


class GlobalFlag(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(4))

    def forward(self, x, mask):
        is_global = (mask > 1).flatten().any().item()
        return x * self.scale * (2 if is_global else 1) + mask.size(1)


def test_value_guard_refusal_names_the_line_the_value_and_the_input():
    traced = tracejit.trace(GlobalFlag(), (torch.randn(2, 4), torch.ones(2, 4, dtype=torch.long)))
    with pytest.raises(ExportError) as info:
        tracejit.export_onnx(traced)
    text = str(info.value)
    assert "is_global = (mask > 1).flatten().any().item()" in text
    assert "which gave False" in text
    assert "computed from input 'mask'" in text and "'x'" not in text.split("guard_outputs")[0]
