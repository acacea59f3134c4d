"""A cache keyed by a length, compared then filled (Wav2Vec2Conformer's rotary embedding): served, or refused, never
wrong (hunt27; still open: see /work/wt/hunt27_findings.md).

``if n == self.cached_len: return self.cached; self.cached_len = n; self.cached = f(n)``. Traced on a fresh module
(cache None) transformers' module is served: the program recomputes at every length (eager's answer at new
lengths; a library class's reads are not looked at, its None -> value write is a lazy set-up). Traced after an eager
call (the cache holds the example's length) the trace takes the cache hit; a new length traces again, and that trace
reads the old key before writing it: refused with the line (the program could only serve it by replaying both writes,
which it cannot do yet), while eager works. The same pattern in the user's own class is refused on the first trace.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit


class Rotary(nn.Module):   # the pattern of modeling_wav2vec2_conformer.py:147-160
    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (100 ** (torch.arange(0, 4, 2).float() / 4)))
        self.cached_len = None
        self.cached = None

    def forward(self, x):
        n = x.shape[1]
        if n == self.cached_len and self.cached is not None:
            return x + self.cached
        self.cached_len = n
        t = torch.arange(n).type_as(self.inv_freq)[:, None] * self.inv_freq
        self.cached = torch.cat((t.cos(), t.sin()), -1)
        return x + self.cached


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def test_a_users_cache_read_before_it_is_written_is_refused_with_the_line():
    """The user's own class: the read of the key before its write (not an ``is None`` test) is seen in its code
    (trace/carried_state.py): refused on a fresh module's first trace; after an eager call the trace takes the hit
    (no write) and a new length's trace is refused. Eager works throughout."""
    model = Rotary()
    with pytest.raises(tracejit.TraceError, match="cached_len") as err:
        _quiet(tracejit.trace, model, (torch.randn(2, 5, 4),), check_trace=False)
    assert f"{__file__}:" in str(err.value)
    model = Rotary()
    model(torch.randn(2, 5, 4))   # the cache holds length 5
    traced = _quiet(tracejit.trace, model, (torch.randn(2, 5, 4),), check_trace=False)
    x = torch.randn(2, 5, 4)
    torch.testing.assert_close(traced(x), model(x))
    with pytest.raises(tracejit.TraceError, match="cached_len") as err:
        _quiet(traced, torch.randn(2, 8, 4))
    assert f"{__file__}:" in str(err.value)
    assert model(torch.randn(2, 8, 4)).shape == (2, 8, 4)


def test_wav2vec2_conformer_rotary_fresh_serves_and_warm_refuses():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.Wav2Vec2ConformerConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, conv_dim=(8, 8),
        conv_stride=(5, 2), conv_kernel=(10, 3), num_feat_extract_layers=2, position_embeddings_type="rotary",
        num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2, conv_depthwise_kernel_size=3)
    fresh = transformers.Wav2Vec2ConformerModel(cfg).eval()
    traced = _quiet(tracejit.trace, fresh, (torch.randn(1, 320),), strict=False, check_trace=False)
    for n in (480, 200):
        x = torch.randn(1, n)
        torch.testing.assert_close(_quiet(traced, x)["last_hidden_state"], fresh(x)["last_hidden_state"])
    warm = transformers.Wav2Vec2ConformerModel(cfg).eval()
    warm(torch.randn(1, 320))
    traced = _quiet(tracejit.trace, warm, (torch.randn(1, 320),), strict=False, check_trace=False)
    with pytest.raises(tracejit.TraceError, match="cached_sequence_length"):
        _quiet(traced, torch.randn(1, 480))
    x = torch.randn(1, 480)
    assert warm(x)["last_hidden_state"].shape[1] > 0   # eager works
