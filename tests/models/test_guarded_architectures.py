"""Third-party architecture styles whose Python reads sizes: traced at one size, called at others.

- a MobileNet / EfficientNet-style conv net ported from TF: 'SAME' padding computed in Python
  from H and W (torch.jit.trace returns wrong numbers: the example's padding; tracejit records
  the padding math, so it runs at every size without a retrace or a GuardError);
- a Swin-style window-attention stack that pads H, W to a multiple of its window
  (torch.jit.trace fails deep inside a view);
- a sequence model that branches on the length (full attention for short inputs, local
  windows for long ones; torch.jit.trace returns the other branch's numbers).

In memory the traced module gives eager's answer on every ALT input (a failed guard retraces);
loaded from a file it gives eager's answer or raises GuardError at the model's source line.
"""
from __future__ import annotations

import io
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn


import tracejit


class SameConv(nn.Module):
    def __init__(self, cin, cout, k, stride):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride)
        self.k, self.s = k, stride

    def forward(self, x):
        ih, iw = x.size()[-2:]
        oh, ow = math.ceil(ih / self.s), math.ceil(iw / self.s)  # @same_pad
        ph = max((oh - 1) * self.s + self.k - ih, 0)
        pw = max((ow - 1) * self.s + self.k - iw, 0)
        if ph > 0 or pw > 0:
            x = F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2])
        return self.conv(x)


class TFPortedConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = SameConv(3, 8, 3, 2)
        self.dw = SameConv(8, 8, 5, 2)
        self.head = SameConv(8, 4, 3, 1)

    def forward(self, x):
        x = F.relu6(self.stem(x))
        x = F.relu6(self.dw(x))
        return self.head(x).mean((2, 3))


class WindowAttention(nn.Module):
    def __init__(self, dim=8, ws=4):
        super().__init__()
        self.ws = ws
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, h, w, c = x.shape
        ws = self.ws
        pad_b, pad_r = (ws - h % ws) % ws, (ws - w % ws) % ws
        if pad_b > 0 or pad_r > 0:  # @window_pad
            x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        hp, wp = x.shape[1], x.shape[2]
        win = x.view(b, hp // ws, ws, wp // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
        q, k, v = self.qkv(win).chunk(3, dim=-1)
        attn = (q @ k.transpose(-2, -1) / math.sqrt(c)).softmax(-1)
        out = self.proj(attn @ v).view(b, hp // ws, wp // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        return out.reshape(b, hp, wp, c)[:, :h, :w, :]


class SwinStyle(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3, 8)
        self.blocks = nn.ModuleList([WindowAttention(), WindowAttention()])

    def forward(self, x):
        x = self.embed(x)
        for blk in self.blocks:
            x = x + blk(x)
        return x.mean((1, 2))


class LengthBranching(nn.Module):
    """Full attention up to 8 tokens, chunked local attention beyond (as long-sequence models do)."""

    def __init__(self, dim=8):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if x.size(1) <= 8:  # @length_branch
            return F.scaled_dot_product_attention(q, k, v)
        b, t, c = x.shape
        chunks = [F.scaled_dot_product_attention(q[:, i:i + 4], k[:, i:i + 4], v[:, i:i + 4]) for i in range(0, t, 4)]
        return torch.cat(chunks, 1)


ARCHITECTURES = {
    "tf_ported_convnet": (TFPortedConvNet, (1, 3, 32, 32), [(1, 3, 33, 33), (2, 3, 31, 37), (1, 3, 32, 32)],
                          "same_pad", "wrong"),
    "swin_style": (SwinStyle, (1, 8, 8, 3), [(1, 7, 9, 3), (2, 12, 8, 3), (1, 4, 4, 3)], "window_pad", "error"),
    "length_branching": (LengthBranching, (2, 6, 8), [(2, 12, 8), (2, 3, 8), (1, 16, 8)], "length_branch", "wrong"),
}


# architectures whose size math is recorded (trace/symfloat.py): no guard fails, nothing retraces
RECORDED = {"tf_ported_convnet"}


def marker_line(marker: str) -> int:
    with open(__file__, encoding="utf-8") as fh:
        return next(i + 1 for i, line in enumerate(fh) if line.rstrip().endswith("# @" + marker))


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def arch(request):
    cls, example, alts, marker, jit_outcome = ARCHITECTURES[request.param]
    torch.manual_seed(0)
    m = cls().eval()
    x = torch.randn(*example)
    traced = quiet(tracejit.trace, m, (x,))
    return m, x, [torch.randn(*s) for s in alts], traced, marker, jit_outcome


def test_alt_inputs_move_the_output(arch):
    m, x, alts, *_ = arch
    outs = [m(a) for a in alts]
    assert all(o.shape != m(x).shape or not torch.allclose(o, m(x)) for o in outs)


@torch.no_grad()
def test_traced_in_memory_equals_eager_on_alt_inputs(arch):
    m, x, alts, traced, *_ = arch
    for a in alts:
        torch.testing.assert_close(quiet(traced, a), m(a), rtol=1e-4, atol=1e-5)
    if type(m).__name__ in {ARCHITECTURES[k][0].__name__ for k in RECORDED}:
        assert len(traced.specializations) == 1   # no retrace
    else:
        assert len(traced.specializations) >= 2


@torch.no_grad()
def test_loaded_gives_eager_answer_or_guard_error_at_the_model_line(arch):
    m, x, alts, traced, marker, _ = arch
    buf = io.BytesIO()
    tracejit.save(quiet(tracejit.trace, m, (x,)), buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    failed = 0
    for a in alts:
        try:
            got = loaded(a)
        except tracejit.GuardError as e:
            failed += 1
            assert e.source.filename == __file__ and e.source.lineno == marker_line(marker), str(e)
            continue
        torch.testing.assert_close(got, m(a), rtol=1e-4, atol=1e-5)
    recorded = type(m).__name__ in {ARCHITECTURES[k][0].__name__ for k in RECORDED}
    assert failed == 0 if recorded else failed >= 1


@torch.no_grad()
def test_torch_jit_trace_side_by_side(arch):
    """torch.jit.trace on the same model: the stale example's padding / branch (documented)."""
    m, x, alts, _, _, jit_outcome = arch
    jitted = quiet(torch.jit.trace, m, (x,), check_trace=False)
    a = alts[0]
    if jit_outcome == "error":
        with pytest.raises(RuntimeError):
            jitted(a)
    else:
        got = quiet(jitted, a)
        assert got.shape != m(a).shape or not torch.allclose(got, m(a), rtol=1e-4, atol=1e-5)
