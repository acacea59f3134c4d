"""The loader's checks refuse no legitimate program: a spread of common ops (Python numbers where
tensors go, strings, dtypes, sizes, dims, views, factories, indexing) traces, saves, loads and
computes what eager and torch.jit.trace compute, on new inputs of other sizes."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
import torch.nn.functional as F

import tracejit


def ops_a(x):
    y = F.gelu(x, approximate="tanh") + F.layer_norm(x, x.shape[-1:]) * 0.5
    y = torch.where(x > 0, y, 0.0).clamp(min=-1.0, max=2) - 2 - x // 3 + x % 2 + 2 ** x.tanh()
    z = torch.einsum("bi,bj->bij", y, x).flatten(1).softmax(-1)
    return z.cumsum(1), torch.div(y, 3, rounding_mode="floor"), y.float().to(torch.float64).sum(dim=(0, 1))


def ops_b(x):
    n = x.size(0)
    pos = torch.arange(n, dtype=x.dtype).unsqueeze(1)
    w = torch.full((1, x.size(1)), 0.5) + torch.zeros_like(x) + x.new_ones(x.shape)
    y = (x + pos * w).view(n, -1, 2).transpose(1, 2).reshape(n, -1)
    top, idx = y.topk(2, dim=1)
    g = y.gather(1, idx) + y.index_select(1, torch.tensor([0, 1]))
    s = torch.cat([y, y.flip(1).roll(1, 1)], dim=1).triu()
    parts = s.chunk(2, dim=1)
    m = y.masked_fill(y < 0, float("-inf")).logsumexp(1)
    return top, g, parts[0] @ parts[1].T, m, y.std(1, correction=0), y.argmax(1)


def ops_c(img):
    x = F.pad(img, (1, 2, 1, 2), mode="reflect")
    x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
    x = F.avg_pool2d(x, 2).unfold(3, 2, 2).mean(-1)
    x = x.repeat(1, 2, 1, 1).expand(2, -1, -1, -1)[:, 1:, ::2]
    return F.adaptive_avg_pool2d(x, 3), (x > 0.1) & (x < 0.9), x.bool().int().sum()


@pytest.mark.parametrize("fn, example, other", [
    (ops_a, (torch.randn(3, 4),), (torch.randn(5, 4),)),
    (ops_b, (torch.randn(4, 6),), (torch.randn(7, 6),)),
    (ops_c, (torch.randn(2, 2, 6, 6),), (torch.randn(2, 2, 8, 10),)),
])
def test_common_ops_round_trip(fn, example, other):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(fn, example)
        reference = torch.jit.trace(fn, example, check_trace=False)
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    want = fn(*other)
    got, ref = loaded(*other), reference(*other)
    for g, w, r in zip(got, want, ref):
        torch.testing.assert_close(g, w, equal_nan=True)
        if g.shape == r.shape:
            torch.testing.assert_close(g, r, equal_nan=True)
    assert any(a.shape != b.shape for a, b in zip(fn(*example), want)) or not torch.equal(fn(*example)[0], want[0])
