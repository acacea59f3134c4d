"""torch's Transformer / MultiheadAttention fast paths: the trace takes eager's path (hunt27; trace/fast_paths.py).

``nn.TransformerEncoder`` in eval mode without grad and with a padding mask runs its layers on a nested tensor and
pads the result with zeros. While tracing, ``torch.overrides.has_torch_function`` said yes (the recorder is a
TorchFunctionMode), so the trace froze the slow path: served under ``torch.no_grad()`` the program's padded
positions held values where eager's are zeros (silent with check_trace off; with it on, every trace under no_grad
was refused). Now the trace follows eager's path, and the conditions of the choice are guarded: the grad mode,
the training flag, ``torch.backends.mha.get_fastpath_enabled()``.
"""
from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import tracejit


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.e = nn.TransformerEncoder(layer, 2)

    def forward(self, x, mask):
        return self.e(x, src_key_padding_mask=mask)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, mask):
        return self.a(x, x, x, key_padding_mask=mask, need_weights=False)[0]


def _inputs(n, padded, batch=2):
    return torch.randn(batch, n, 8), torch.arange(n)[None].expand(batch, n) >= n - padded


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@pytest.mark.parametrize("cls", [Encoder, Attention])
def test_served_without_grad_the_program_takes_eagers_path(cls):
    torch.manual_seed(0)
    model = cls().eval()
    with torch.no_grad():
        traced = _quiet(tracejit.trace, model, _inputs(6, 2))   # check_trace on: refused before (Encoder)
        unchecked = _quiet(tracejit.trace, model, _inputs(6, 2), check_trace=False)
        optimized = tracejit.optimize_for_inference(unchecked)
        for n, padded in ((6, 3), (9, 5), (4, 0)):
            x, mask = _inputs(n, padded, batch=3)
            expected = model(x, mask)
            for program in (traced, unchecked, optimized):
                torch.testing.assert_close(_quiet(program, x, mask), expected)


def test_the_path_follows_grad_mode_and_the_fastpath_flag_at_call():
    torch.manual_seed(0)
    model = Encoder().eval()
    with torch.no_grad():
        traced = _quiet(tracejit.trace, model, _inputs(6, 2), check_trace=False)
    x, mask = _inputs(7, 3)
    with torch.no_grad():
        fast = model(x, mask)
    slow = model(x, mask).detach()   # grad enabled, parameters need grad: the slow path
    assert not torch.allclose(fast, slow)   # the two paths differ at the padded positions
    torch.testing.assert_close(_quiet(traced, x, mask).detach(), slow)
    enabled = torch.backends.mha.get_fastpath_enabled()
    try:
        torch.backends.mha.set_fastpath_enabled(False)
        with torch.no_grad():
            torch.testing.assert_close(_quiet(traced, x, mask), model(x, mask))
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)
    with torch.no_grad():
        torch.testing.assert_close(_quiet(traced, x, mask), fast)


def test_a_saved_fast_path_program_loads_and_answers_as_eager_or_refuses_clearly():
    torch.manual_seed(0)
    model = Encoder().eval()
    with torch.no_grad():
        traced = _quiet(tracejit.trace, model, _inputs(6, 2))
        buf = io.BytesIO()
        try:
            tracejit.save(traced, buf)
        except tracejit.SaveError as e:   # a guard a file cannot hold: said at save, with the line
            assert "transformer.py" in str(e)
            return
        loaded = tracejit.load(io.BytesIO(buf.getvalue()))
        x, mask = _inputs(9, 4)
        torch.testing.assert_close(_quiet(loaded, x, mask), model(x, mask))
