"""transformers models asked for ``output_hidden_states`` / ``output_attentions``: their output capturing (forward
hooks that store each layer's output, returned by the model) hands tensors out of the encoder's call another way
than its return value. tracejit records forward again with that call traced through in place (trace/attempts.py),
so every hidden state and attention map is the call's own, on new batches and lengths, live, optimized and loaded.
Before session 28, BertModel with output_hidden_states=True was refused at trace time."""
from __future__ import annotations

import warnings

import pytest
import torch

import tracejit

transformers = pytest.importorskip("transformers")


def _tiny(kind):
    torch.manual_seed(0)
    if kind == "bert":
        cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")
        return transformers.BertModel(cfg).eval(), {"output_attentions": True}
    if kind == "bert_classifier":
        cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=64)
        return transformers.BertForSequenceClassification(cfg).eval(), {}
    cfg = transformers.RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=80)
    return transformers.RobertaModel(cfg).eval(), {}


def _leaves(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _leaves(o)]
    return [t for k in out for t in _leaves(out[k])]


def _assert_same(got, ref):
    assert type(got) is type(ref)
    assert list(ref.keys()) == list(got.keys())
    g, r = _leaves(got), _leaves(ref)
    assert len(g) == len(r)
    for a, b in zip(g, r):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["bert", "bert_classifier", "roberta"])
def test_hidden_states_serve_new_batches_and_lengths_live_and_loaded(kind, tmp_path):
    model, extra = _tiny(kind)
    flags = {"output_hidden_states": True, **extra}
    ids = torch.randint(3, 100, (2, 8))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(input_ids=ids, **flags)   # transformers installs its capture hooks on the first such call
        traced = tracejit.trace(model, example_kwarg_inputs={"input_ids": ids, **flags}, strict=False)
        tracejit.save(traced, tmp_path / "m.tj")
        loaded = tracejit.load(tmp_path / "m.tj")
        optimized = tracejit.optimize_for_inference(traced)
        for shape in [(3, 11), (1, 5)]:
            new = torch.randint(3, 100, shape)
            ref = model(input_ids=new, **flags)
            assert len(ref.hidden_states) == model.config.num_hidden_layers + 1
            assert not torch.allclose(ref.hidden_states[1][0, :1], model(input_ids=ids, **flags).hidden_states[1][0, :1])
            _assert_same(traced(input_ids=new, **flags), ref)
            _assert_same(loaded(input_ids=new, **flags), ref)
            for a, b in zip(_leaves(optimized(input_ids=new, **flags)), _leaves(ref)):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_hidden_states_carry_gradients_as_in_eager():
    model, _ = _tiny("bert")
    ids = torch.randint(3, 100, (2, 8))
    model(input_ids=ids, output_hidden_states=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, example_kwarg_inputs={"input_ids": ids, "output_hidden_states": True},
                                strict=False)
    new = torch.randint(3, 100, (3, 6))
    traced(input_ids=new, output_hidden_states=True).hidden_states[1].sum().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    model(input_ids=new, output_hidden_states=True).hidden_states[1].sum().backward()
    ref = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert set(got) == set(ref) and any("layer.0" in n for n in ref)
    for name in ref:
        torch.testing.assert_close(got[name], ref[name])
