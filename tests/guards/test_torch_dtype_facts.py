"""A dtype fact torch's own code branches on is guarded (hunt27; trace/dtype_reads.on_method).

``nn.MultiheadAttention`` (through ``F._canonical_mask``) adds a float ``key_padding_mask`` and fills a bool one with
-inf: it asks ``torch.is_floating_point(mask)``. Reads inside torch's code were not guarded, so a program traced with
a float mask and called with a bool one added the bools (max error ~0.7 against eager), silently; traced with a bool
mask, a float one crashed in masked_fill_. Now the answer is guarded at the line that called torch, and the live
program traces again (eager's answer, or eager's error).
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, mask):
        return self.a(x, x, x, key_padding_mask=mask, need_weights=False)[0]


def _masks(n, padded):
    bool_mask = torch.arange(n)[None].expand(2, n) >= n - padded
    return {"bool": bool_mask, "float": torch.zeros(2, n).masked_fill(bool_mask, float("-inf"))}


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@pytest.mark.parametrize("traced_with,called_with", [("float", "bool"), ("bool", "float")])
def test_a_mask_of_the_other_dtype_gets_eagers_answer(traced_with, called_with):
    torch.manual_seed(0)
    model = Attention().eval()
    traced = _quiet(tracejit.trace, model, (torch.randn(2, 5, 8), _masks(5, 2)[traced_with]), check_trace=False)
    optimized = tracejit.optimize_for_inference(
        _quiet(tracejit.trace, model, (torch.randn(2, 5, 8), _masks(5, 2)[traced_with]), check_trace=False))
    for n, padded in ((5, 1), (7, 3)):
        x, mask = torch.randn(2, n, 8), _masks(n, padded)[called_with]
        expected = model(x, mask)
        torch.testing.assert_close(_quiet(traced, x, mask), expected)
        torch.testing.assert_close(_quiet(optimized, x, mask), expected)
    x, mask = torch.randn(2, 6, 8), _masks(6, 2)[traced_with]
    torch.testing.assert_close(_quiet(traced, x, mask), model(x, mask))   # the traced dtype still served


def test_a_mask_eager_refuses_is_refused_the_same_way():
    model = Attention().eval()
    traced = _quiet(tracejit.trace, model, (torch.randn(2, 5, 8), _masks(5, 2)["bool"]), check_trace=False)
    bad = _masks(5, 2)["bool"].to(torch.uint8)
    with pytest.raises(AssertionError, match="key_padding_mask"):
        model(torch.randn(2, 5, 8), bad)
    with pytest.raises(AssertionError, match="key_padding_mask"):
        _quiet(traced, torch.randn(2, 5, 8), bad)
