"""transformers models outside the zoo that had no ONNX backend before breadth27 (issue #25), each served by
onnxruntime with eager's answer on the example and on a new input (another batch and, where the model allows,
size): Perceiver (token_rows named two values ``<name>_rows``), Informer (a write through ``x.to(own dtype)``), FNet
(``fft_fftn``). (DPT, fixed by test_float_list_args.py, is left out: its trace pins batch and size, modeling_dpt.py:696
``if hidden_state.shape != residual.shape`` records ``size == 1``, so a new input goes to the traced program.) torch.jit.trace, side by
side, answers them too (no data-dependent branch here); the point is that the ONNX backend now builds and answers."""
from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
from torch import nn

import tracejit

pytestmark = [pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers"),
              pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime")]


class Call(nn.Module):
    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        return self.model(**dict(zip(self.names, args)), return_dict=False)[0]


def _build(name):
    import transformers as tf
    tf.logging.set_verbosity_error()
    torch.manual_seed(0)
    if name == "perceiver":
        cfg = tf.PerceiverConfig(num_latents=8, d_latents=32, d_model=16, num_blocks=1, num_self_attends_per_block=2,
                                 num_self_attention_heads=4, num_cross_attention_heads=1, qk_channels=32,
                                 v_channels=32)
        model = Call(tf.PerceiverModel(cfg), ("inputs",))
        return model, lambda b, n: (torch.randn(b, n, 16, generator=torch.Generator().manual_seed(b + n)),), \
            (1, 16), (2, 24)
    if name == "fnet":
        cfg = tf.FNetConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                            max_position_embeddings=64)
        model = Call(tf.FNetModel(cfg), ("input_ids",))
        return model, lambda b, n: (torch.randint(0, 1000, (b, n), generator=torch.Generator().manual_seed(b + n)),), \
            (1, 16), (2, 24)
    cfg = tf.InformerConfig(prediction_length=8, context_length=16, lags_sequence=[1, 2, 3], num_time_features=2,
                            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)
    model = Call(tf.InformerModel(cfg), ("past_values", "past_time_features", "past_observed_mask",
                                         "future_time_features", "future_values"))

    def inputs(b, _):
        g = torch.Generator().manual_seed(b)
        return (torch.randn(b, 19, generator=g), torch.randn(b, 19, 2, generator=g), torch.ones(b, 19),
                torch.randn(b, 8, 2, generator=g), torch.randn(b, 8, generator=g))
    return model, inputs, (1, 0), (3, 0)


@pytest.mark.parametrize("name", ["perceiver", "fnet", "informer"])
def test_onnxruntime_backend_builds_and_answers_as_eager(name):
    model, inputs, example, new = _build(name)
    model = model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(*inputs(*example))   # transformers installs its output-capturing hooks on a first call
        traced = tracejit.trace(model, inputs(*example))
        program = tracejit.optimize_for_inference(traced, backend="onnxruntime")   # before: failed to build
        for shape in (example, new):   # Informer samples keys with torch.randint (ONNX: its own RandomUniformLike);
            x = inputs(*shape)       # at these lengths every query is kept, so the draw moves the answer ~1e-7
            want, got = model(*x), program(*x)
            scale = max(1.0, float(want.abs().max()))
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * scale)
        assert program.handed_over == 0   # onnxruntime's answers
