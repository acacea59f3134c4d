"""transformers models outside the zoo that bench/serve_corpus19.py found broken, tiny configs, random weights:
each traces, saves and loads, and its optimized and onnxruntime programs give eager's answer on another batch and
length, as closely as torch.jit's freeze (zoo_check.check). What broke: Falcon (multi-query attention) indexes
with a Python list (``fused_qkv[..., [-2], :]``: save refused it) and uses ``x.T`` (no ONNX conversion); Canine
calls ``torch.repeat_interleave(x, repeats=4, dim=-2)`` (recorded as ``self_Tensor``: save refused it); BLOOM's
GeLU is a custom autograd Function (no ONNX conversion)."""
from __future__ import annotations

import importlib.util
import io
import warnings

import pytest
import torch
from torch import nn

import tracejit

from zoo_check import check, needs_onnx

pytestmark = [needs_onnx, pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")]


class LastHidden(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _model(name: str):
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    small = dict(vocab_size=1000, hidden_size=64, num_attention_heads=4)
    config, cls = {
        "falcon": (transformers.FalconConfig(num_hidden_layers=1, multi_query=True, use_cache=False, **small), transformers.FalconModel),
        "canine": (transformers.CanineConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                             intermediate_size=128, downsampling_rate=4, num_hash_buckets=64),
                   transformers.CanineModel),
        "bloom": (transformers.BloomConfig(vocab_size=1000, hidden_size=64, n_layer=1, n_head=4, use_cache=False), transformers.BloomModel),
    }[name]
    return LastHidden(cls(config).eval()).eval()


def _text(batch, length, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, -3:] = 0 if batch > 1 else 1
    return torch.randint(3, 1000, (batch, length), generator=gen), mask


@pytest.mark.parametrize("name", ["falcon", "canine", "bloom"])
def test_model_saves_and_serves_new_shapes(name):
    model = _model(name)
    example = _text(1, 16, 1)
    news = [_text(2, 16, 2), _text(2, 24, 3)]
    check(model, example, news)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, example, specialize_for=[news[1]])
        buf = io.BytesIO()
        tracejit.save(traced, buf)
        buf.seek(0)
        loaded = tracejit.load(buf)
        for inputs in news:
            torch.testing.assert_close(loaded(*inputs), model(*inputs), rtol=1e-5, atol=1e-5)
