"""transformers models that torch.jit.trace traces and tracejit refused or could not save (session 30, reach30;
bench/reach_sweep30.py). Each is traced on one shape and called at a new batch and length / image size, live and
saved + loaded, against eager (a GuardError naming the line where that is the honest answer)."""
from __future__ import annotations

import io
import warnings

import pytest
import torch

import tracejit

transformers = pytest.importorskip("transformers")


def _quiet(fn, *args, **kwargs):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _loaded(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


def _leaves(out):
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _assert_eager(got, want):
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want) and want
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def _text(batch, length, seed):
    return torch.randint(3, 100, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_swin_traced_fresh_with_hidden_states_serves_new_batches_and_guards_other_sizes():
    """Swin clamps ``window_size`` on every call whose resolution is at most the window (a 0-d tensor while
    tracing): the first run sets up output capturing, the second writes the same window again (trace/rewrites.py).
    Refused before session 30 ("attribute 'window_size' ... changed")."""
    torch.manual_seed(0)
    cfg = transformers.SwinConfig(image_size=16, patch_size=4, embed_dim=16, depths=[2], num_heads=[2],
                                  window_size=4)
    model = transformers.SwinModel(cfg).eval()
    images = lambda b, s: torch.randn(b, 3, s, s, generator=torch.Generator().manual_seed(b * s))  # noqa: E731
    traced = _quiet(tracejit.trace, model, example_kwarg_inputs={"pixel_values": images(1, 16),
                                                                 "output_hidden_states": True}, strict=False)
    loaded = _loaded(traced)
    x = images(3, 16)
    want = _quiet(model, pixel_values=x, output_hidden_states=True)
    assert len(want.hidden_states) == 2
    for program in (traced, loaded):
        _assert_eager(_quiet(program, pixel_values=x, output_hidden_states=True), want)
    x = images(2, 24)   # the resolution passes the window: no clamp
    with pytest.raises(tracejit.GuardError, match="min\\(input_resolution\\) <= self.window_size"):
        _quiet(loaded, pixel_values=x, output_hidden_states=True)
    _assert_eager(_quiet(traced, pixel_values=x, output_hidden_states=True),
                  _quiet(model, pixel_values=x, output_hidden_states=True))


def test_ctrl_converting_its_buffer_on_every_call_traces():
    """CTRL assigns ``self.pos_encoding = self.pos_encoding.to(device, dtype)`` (a buffer) on every call: refused
    before ("forward replaced or added buffer `pos_encoding`"); torch.jit traces it."""
    torch.manual_seed(0)
    cfg = transformers.CTRLConfig(vocab_size=100, n_embd=32, n_layer=1, n_head=2, dff=64, n_positions=64,
                                  use_cache=False)
    model = transformers.CTRLModel(cfg).eval()
    table = model.pos_encoding
    traced = _quiet(tracejit.trace, model, example_kwarg_inputs={"input_ids": _text(2, 8, 1)}, strict=False)
    assert model.pos_encoding is table
    loaded = _loaded(traced)
    for batch, length in ((3, 13),):
        ids = _text(batch, length, batch)
        want = _quiet(model, input_ids=ids)
        for program in (traced, loaded):
            _assert_eager(_quiet(program, input_ids=ids), want)


def test_ibert_saves_and_loads():
    """IBert's layer norm (its float mode) calls ``x.mean(axis=2, keepdim=True)``: the node held numpy's ``axis``, and save refused
    the program (its own load check: "arguments do not bind to the schema aten::mean")."""
    torch.manual_seed(0)
    cfg = transformers.IBertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=64, max_position_embeddings=64)
    model = transformers.IBertModel(cfg).eval()
    traced = _quiet(tracejit.trace, model, example_kwarg_inputs={"input_ids": _text(1, 8, 1)}, strict=False)
    loaded = _loaded(traced)
    for batch, length in ((2, 8), (3, 12)):
        ids = _text(batch, length, batch + 10)
        want = _quiet(model, input_ids=ids)
        for program in (traced, loaded):
            _assert_eager(_quiet(program, input_ids=ids), want)
