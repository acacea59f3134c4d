"""transformers models outside the zoo that bench/serve_corpus19.py found unservable, tiny configs, random weights:
each is saved, loaded without its class and called on a new batch and length (image size), equal to eager.

- Mixtral and Qwen2-MoE run their experts with ``aten::_grouped_mm`` (transformers' ``integrations/moe.py``), which
  the file allow-list did not hold: ``save`` refused them. It is allowed with a size rule that also checks the
  offsets the kernel trusts (serialize/op_sizes_grouped.py; hostile rows: tests/security/test_grouped_mm_files.py).
- Longformer chunks its attention with ``as_strided`` (refused in files) and sizes a view with
  ``torch.div(n, 2 * w, rounding_mode="trunc")`` (a 0-d tensor the file's schema check refused as a size):
  serialize/op_sizes_strided.py, trace/int_tensors.py. Its strides are read from tensors (guarded), so each
  (batch, length) is a specialization; torch.jit.trace answers 0.28 off at another batch and length.
- MobileViT rounds a size with ``torch.ceil(h / p)`` when ``torch.jit.is_tracing()``: tracing failed ("ceil():
  argument 'input' must be Tensor, not TracedFloat"; trace/torch_rounding.py).
"""
from __future__ import annotations

import importlib.util
import io
import warnings

import pytest
import torch

import tracejit
from model_corpus import LastHidden

pytestmark = [pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")]

DECODER = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=128, max_position_embeddings=64, use_cache=False)


def _model(name: str):
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config, cls = {
        "mixtral": (transformers.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **DECODER),
                    transformers.MixtralModel),
        "qwen2_moe": (transformers.Qwen2MoeConfig(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                                  shared_expert_intermediate_size=64, **DECODER),
                      transformers.Qwen2MoeModel),
        "mobilevit": (transformers.MobileViTConfig(hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]),
                      transformers.MobileViTModel),
    }[name]
    return LastHidden(cls(config).eval()).eval()


def _round_trip(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


def _ids(batch, length, seed):
    return (torch.randint(3, 1000, (batch, length), generator=torch.Generator().manual_seed(seed)),)


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_mixture_of_experts_saves_loads_and_serves_a_new_length(name):
    model = _model(name)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, _ids(2, 16, 1))   # batch 1 would guard the mask's batch against 1
        jit = torch.jit.trace(model, _ids(2, 16, 1), check_trace=False)
        loaded = _round_trip(traced)
        for inputs in (_ids(2, 16, 2), _ids(2, 24, 3), _ids(3, 5, 4)):
            want = model(*inputs)
            assert torch.equal(loaded(*inputs), traced(*inputs))
            torch.testing.assert_close(loaded(*inputs), want, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(jit(*inputs), want, rtol=1e-5, atol=1e-5)   # torch.jit, side by side
        assert len(traced.specializations) == 1


def test_mobilevit_traces_and_serves_another_image_size():
    model = _model("mobilevit")
    image = lambda b, s, seed: (torch.randn(b, 3, s, s, generator=torch.Generator().manual_seed(seed)),)  # noqa: E731
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, image(1, 64, 1))
        first = _round_trip(traced)
        same, other = image(2, 64, 2), image(2, 96, 3)
        assert torch.equal(first(*same), model(*same))
        with pytest.raises(tracejit.GuardError, match="generic.py"):   # transformers' torch_int(): int() of the size
            first(*other)
        assert torch.equal(traced(*other), model(*other))   # a new specialization
        both = _round_trip(traced)
        for inputs in (same, other):
            assert torch.equal(both(*inputs), model(*inputs))


def test_longformer_saves_loads_and_serves_its_specializations():
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.LongformerConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                           intermediate_size=128, max_position_embeddings=64, attention_window=8)
    model = LastHidden(transformers.LongformerModel(config).eval()).eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, _ids(2, 16, 1), specialize_for=[_ids(2, 24, 2), _ids(1, 16, 3)])
        loaded = _round_trip(traced)
        for inputs in (_ids(2, 16, 4), _ids(2, 24, 5), _ids(1, 16, 6)):
            want = model(*inputs)
            assert torch.equal(traced(*inputs), want)
            assert torch.equal(loaded(*inputs), want)
        with pytest.raises(tracejit.GuardError, match="modeling_longformer.py"):
            loaded(*_ids(3, 16, 7))   # a batch no specialization holds: the strides' guard names its line


def test_mixture_of_experts_runs_in_onnxruntime():
    """The onnxruntime program of Mixtral failed on every call: the slice checking a size guard dropped
    ``p[order] = arange(n)`` and indexed with uninitialised memory (backends/intermediate_sizes.tensor_slice)."""
    pytest.importorskip("onnxruntime")
    model = _model("mixtral")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = tracejit.optimize_for_inference(tracejit.trace(model, _ids(2, 16, 1)), backend="onnxruntime")
        for inputs in (_ids(2, 16, 2), _ids(2, 24, 3)):
            torch.testing.assert_close(program(*inputs), model(*inputs), rtol=1e-5, atol=1e-5)
