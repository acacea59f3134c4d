"""A submodule method whose trace holds a Python object that is not data (transformers' EncoderDecoderCache
handed to a decoder layer) is left out of the saved file with a warning naming it: the root still saves, loads and
answers as eager on new inputs; calling the left-out method on the loaded program raises a LoadError saying why
(serialize/left_out.py, serialize/left_out_stubs.py). A root method holding such an object is still a SaveError,
and a file's ``left_out`` entries are checked like the rest of the document."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import tracejit
from left_out_models import Cache, Layer as SharedLayer, LeftOutModel
from serialize_testlib import expect_load_error, load_bytes, quiet_trace, rewrite, to_bytes


def Model():
    return LeftOutModel(width=6, outputs=3)


def Layer():
    return SharedLayer(width=6)


def _saved(model, example):
    traced = quiet_trace(model, example)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        raw = to_bytes(traced)
    return raw, [str(w.message) for w in seen if "left out" in str(w.message)]


def test_a_submodule_method_holding_an_object_is_left_out_and_the_root_answers_as_eager():
    torch.manual_seed(0)
    model = Model().eval()
    raw, said = _saved(model, (torch.randn(2, 5, 6),))
    assert len(said) == 1 and "layer.forward" in said[0] and "Cache" in said[0], said
    loaded = load_bytes(raw)
    for shape in [(3, 7, 6), (1, 2, 6)]:   # new shapes and values
        x = torch.randn(*shape)
        torch.testing.assert_close(loaded(x), model(x))
    with pytest.raises(tracejit.LoadError, match=r"layer\.forward is not in this file.*Cache"):
        loaded.layer(torch.randn(2, 6))
    torch.testing.assert_close(loaded.head(torch.randn(4, 6) * 0), model.head(torch.zeros(4, 6)))   # kept methods stay
    again = to_bytes(loaded)   # saved again from the loaded program: still left out, still said
    with pytest.raises(tracejit.LoadError, match="not in this file"):
        load_bytes(again).layer(torch.randn(2, 6))
    x = torch.randn(5, 3, 6)
    torch.testing.assert_close(load_bytes(again)(x), model(x))


def test_a_root_method_holding_an_object_is_still_a_save_error():
    torch.manual_seed(0)
    layer = Layer().eval()
    traced = quiet_trace(layer, (torch.randn(2, 6), Cache(2.0)))
    with pytest.raises(tracejit.SaveError, match="Cache"):
        tracejit.save(traced, io.BytesIO())


def test_a_program_with_nothing_left_out_writes_no_left_out_entry():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    raw, said = _saved(m, (torch.randn(2, 4),))
    assert not said and b"left_out" not in raw


def _with_left_out(raw, path, value):
    def edit(doc):
        entry = next(e for e in doc["program"]["modules"] if e["path"] == path)
        entry["left_out"] = value
    return rewrite(raw, edit)


@pytest.mark.parametrize("path,value,needle", [
    ("", [["forward", "x"]], "root method is never left out"),
    ("layer", [["forward", "x"]], "also holds"),   # a method the module holds
    ("head", [["forward", "x"], ["forward", "y"]], "names twice"),
    ("head", [["_private", "x"]], "cannot name a traced method"),
    ("head", [["weight", "x"]], "cannot name a traced method"),   # a parameter's name
    ("head", [["extra", "x" * 5000]], "at most 1000"),
    ("head", [["extra"]], "[method, reason] pairs"),
    ("head", "forward", "[method, reason] pairs"),
    ("head", [["extra", 7]], "expected a string"),
])
def test_a_crafted_left_out_entry_is_a_load_error(path, value, needle):
    torch.manual_seed(0)
    model = Model().eval()
    raw, _ = _saved(model, (torch.randn(2, 5, 6),))
    if path == "layer":   # a module that keeps its method
        raw = to_bytes(quiet_trace(nn.Sequential(nn.Linear(6, 6)), (torch.randn(2, 6),)))
        path = "0"
    expect_load_error(_with_left_out(raw, path, value), needle)


def test_a_well_formed_left_out_entry_on_a_file_raises_only_when_called():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 6), nn.ReLU()).eval()
    raw = to_bytes(quiet_trace(m, (torch.randn(2, 6),)))
    loaded = load_bytes(_with_left_out(raw, "1", [["extra", "a reason"]]))
    x = torch.randn(3, 6)
    torch.testing.assert_close(loaded(x), m(x))
    with pytest.raises(tracejit.LoadError, match="1.extra is not in this file.*a reason"):
        loaded.get_submodule("1").extra(x)


def _informer(model_cls: str, config_cls: str):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = getattr(transformers, config_cls)(prediction_length=8, context_length=16, lags_sequence=[1, 2, 3],
                                            num_time_features=2, d_model=32, encoder_layers=2, decoder_layers=2,
                                            encoder_attention_heads=4, decoder_attention_heads=4,
                                            encoder_ffn_dim=64, decoder_ffn_dim=64)
    inner = getattr(transformers, model_cls)(cfg).eval()

    class Series(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, pv, ptf, pom, ftf, fv):
            return self.m(past_values=pv, past_time_features=ptf, past_observed_mask=pom, future_time_features=ftf,
                          future_values=fv, return_dict=False)[0]
    return Series().eval()


def _series_inputs(b: int):
    g = torch.Generator().manual_seed(b)
    return (torch.randn(b, 19, generator=g), torch.randn(b, 19, 2, generator=g), torch.ones(b, 19),
            torch.randn(b, 8, 2, generator=g), torch.randn(b, 8, generator=g))


@pytest.mark.parametrize("model_cls,config_cls", [("InformerModel", "InformerConfig"),
                                                  ("TimeSeriesTransformerModel", "TimeSeriesTransformerConfig")])
def test_informer_and_time_series_transformer_save_load_and_answer_as_eager(model_cls, config_cls):
    model = _informer(model_cls, config_cls)
    with torch.no_grad():
        raw, said = _saved(model, _series_inputs(2))
        assert any("m.decoder.layers.0" in s and "EncoderDecoderCache" in s for s in said), said
        loaded = load_bytes(raw)
        x = _series_inputs(4)   # a new batch and new values
        torch.manual_seed(1)   # Informer's attention samples keys (torch.randint): the same draws for both
        got = loaded(*x)
        torch.manual_seed(1)
        torch.testing.assert_close(got, model(*x))
        with pytest.raises(tracejit.LoadError, match="EncoderDecoderCache"):
            loaded.get_submodule("m.decoder.layers.0")(torch.randn(4, 8, 32))
