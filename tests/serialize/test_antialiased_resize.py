"""Antialiased resizes (``interpolate(antialias=True)``: ATen's ``_upsample_bilinear2d_aa`` /
``_upsample_bicubic2d_aa``, DINOv2's position embeddings) in saved files: on the allow-list with the other resizes,
sized by their output, and with their window's scale set only by the output size (serialize/op_sizes_refused.py
``antialiased``): a file that states ``scales_h`` / ``scales_w`` is refused at load."""
from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F

import tracejit
from filesurgery import parse, rewrite


class Resize(torch.nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def forward(self, x):
        half = (x.shape[-2] // 2, x.shape[-1] // 2 + 1)
        return F.interpolate(x, size=half, mode=self.mode, antialias=True, align_corners=False) * 2


def _saved(mode):
    traced = tracejit.trace(Resize(mode), (torch.randn(1, 3, 16, 16),))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return buf.getvalue()


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_a_saved_antialiased_resize_loads_and_gives_eagers_answer_on_new_sizes(mode):
    raw = _saved(mode)
    doc, _ = parse(raw)
    ops = {n["op"].partition(".")[0] for g in doc["program"]["graphs"] for n in g["nodes"]}
    assert f"aten::_upsample_{mode}2d_aa" in ops
    loaded = tracejit.load(io.BytesIO(raw))
    gen = torch.Generator().manual_seed(0)
    outs = []
    for shape in [(1, 3, 16, 16), (2, 3, 20, 24), (1, 3, 9, 40)]:
        x = torch.randn(shape, generator=gen)
        got = loaded(x)
        assert torch.equal(got, Resize(mode)(x))
        outs.append(got)
    assert outs[1].shape == (2, 3, 10, 13)   # the size follows the input


def _with_scales(raw, mode, scales):
    def edit(doc):
        for g in doc["program"]["graphs"]:
            for n in g["nodes"]:
                if n["op"].startswith(f"aten::_upsample_{mode}2d_aa."):
                    x = n["args"][0]
                    n["op"] = f"aten::_upsample_{mode}2d_aa.default"
                    n["args"] = [x, [256, 256], False, *scales]
                    n["kwargs"] = []
    return rewrite(raw, edit_doc=edit)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_a_file_stating_the_antialiased_windows_scale_is_refused_at_load(mode):
    raw = _saved(mode)
    with pytest.raises(Exception, match=r"antialiased resize with explicit scales_h and scales_w"):
        tracejit.load(io.BytesIO(_with_scales(raw, mode, [1e-30, 1e-30])))
    loaded = tracejit.load(io.BytesIO(_with_scales(raw, mode, [None, None])))   # the output size alone: loads
    x = torch.randn(1, 3, 16, 16)
    assert torch.equal(loaded(x), F.interpolate(x, size=(256, 256), mode=mode, antialias=True) * 2)
