"""Weight norm (``torch._weight_norm``, a private op no file may name) is recorded as the public ops it
computes (trace/decompositions.py): traced, saved, loaded and differentiated like eager, on every ``dim``.
Before, a model with weight norm (wav2vec2's positional convolution) traced but could not be saved."""
from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import tracejit


def _weight_normed(style: str, dim):
    torch.manual_seed(0)
    conv = nn.Conv1d(4, 6, 3, padding=1)
    if style == "parametrization":
        conv = nn.utils.parametrizations.weight_norm(conv, dim=dim)
        with torch.no_grad():
            conv.parametrizations.weight.original0.mul_(torch.rand_like(conv.parametrizations.weight.original0) + .5)
    else:
        conv = nn.utils.weight_norm(conv, dim=dim)
        with torch.no_grad():
            conv.weight_g.mul_(torch.rand_like(conv.weight_g) + 0.5)
    return conv


@pytest.mark.parametrize("dim", [0, 1, 2, -1, None])
@pytest.mark.parametrize("style", ["parametrization", "hook"])
def test_weight_norm_traces_saves_and_loads_with_eagers_answers(style, dim):
    model = _weight_normed(style, dim)
    traced = tracejit.trace(model, (torch.randn(2, 4, 7),))
    assert "_weight_norm" not in traced.code
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    x = torch.randn(3, 4, 11)
    want = model(x)
    torch.testing.assert_close(traced(x), want)
    torch.testing.assert_close(loaded(x), want)


@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm_gradients_equal_eagers(dim):
    model = _weight_normed("parametrization", dim)
    traced = tracejit.trace(model, (torch.randn(2, 4, 7),))
    x = torch.randn(3, 4, 9)

    def grads(fn):
        model.zero_grad()
        fn(x).square().sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    want, got = grads(model), grads(traced)
    assert set(want) == set(got) and len(want) == 3
    for name in want:
        torch.testing.assert_close(got[name], want[name], msg=name)


def test_a_weight_normed_speech_model_saves_and_loads():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                                         conv_kernel=(10, 3), num_conv_pos_embeddings=8,
                                         num_conv_pos_embedding_groups=2)
    model = transformers.Wav2Vec2Model(config).eval()
    with torch.no_grad():
        traced = tracejit.trace(model, (torch.randn(2, 400),), strict=False)
        buf = io.BytesIO()
        tracejit.save(traced, buf)
        buf.seek(0)
        loaded = tracejit.load(buf)
        x = torch.randn(1, 560)
        torch.testing.assert_close(loaded(x)["last_hidden_state"], model(x).last_hidden_state)
