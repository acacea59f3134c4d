"""Convolutions in forms torch_lib did not export (export/convolution.py), found by bench/serve_corpus19.py; each
gives eager's answers in onnxruntime and OpenVINO on new shapes:

- ``padding="valid"`` / ``"same"`` (``aten::convN.padding``: transformers' SigLIP patch embedding, EfficientNet's
  stem): torch_lib wrote the string as ``Conv``'s pads and the checker refused the model;
- ``groups`` computed from a size (transformers' Mamba: ``F.conv1d(x, weight=w, groups=x.shape[1])``, every
  argument by keyword): ONNX's ``group`` is an attribute, and the traced value failed the conversion."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from backend_check import assert_backends_match

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")

CASES = {   # name -> (conv class, options, example shape, new shapes)
    "2d_valid_bias": (nn.Conv2d, dict(kernel_size=3, padding="valid", stride=2), (1, 3, 9, 9), [(2, 3, 12, 7)]),
    "2d_same_even_kernel": (nn.Conv2d, dict(kernel_size=4, padding="same", bias=False), (1, 3, 8, 8), [(2, 3, 11, 6)]),
    "2d_same_dilated_grouped": (nn.Conv2d, dict(kernel_size=(3, 2), padding="same", dilation=2, groups=3),
                                (1, 3, 8, 8), [(3, 3, 9, 13)]),
    "1d_same": (nn.Conv1d, dict(kernel_size=5, padding="same"), (1, 3, 10), [(2, 3, 17)]),
    "3d_valid": (nn.Conv3d, dict(kernel_size=2, padding="valid", bias=False), (1, 3, 4, 5, 5), [(2, 3, 5, 6, 4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_named_padding_gives_eager_answers_on_new_shapes(name):
    cls, options, example, new = CASES[name]
    torch.manual_seed(0)
    conv = cls(3, 6, **options).eval()
    gen = torch.Generator().manual_seed(1)
    assert_backends_match(conv, (torch.randn(*example, generator=gen),),
                          [(torch.randn(*s, generator=gen),) for s in new], name, rtol=1e-5, atol=1e-5)


class DepthwiseBySize(nn.Module):
    """transformers' Mamba ``causal_conv1d_fn``: a depthwise conv whose groups is the input's channel count."""

    def __init__(self, bias: bool):
        super().__init__()
        torch.manual_seed(0)
        self.weight = nn.Parameter(torch.randn(6, 4))
        self.bias = nn.Parameter(torch.randn(6)) if bias else None

    def forward(self, x):
        _, channels, length = x.shape
        out = F.conv1d(x, weight=self.weight.unsqueeze(1), bias=self.bias, padding=3, groups=channels)
        return out[:, :, :length]


@pytest.mark.parametrize("bias", [True, False])
def test_groups_from_a_traced_size_gives_eager_answers_on_new_shapes(bias):
    gen = torch.Generator().manual_seed(2)
    assert_backends_match(DepthwiseBySize(bias).eval(), (torch.randn(1, 6, 9, generator=gen),),
                          [(torch.randn(3, 6, 14, generator=gen),)], f"groups bias={bias}", rtol=1e-5, atol=1e-5)
