"""Weight norm (``torch._weight_norm``: nn.utils.weight_norm and its parametrization, wav2vec2's / HuBERT's / SEW's
positional convolution) is recorded as eager runs it, ``aten::_weight_norm``: traced, saved, loaded and
differentiated with eager's answer bit for bit, on every ``dim``, and exported to ONNX as ATen's composite.

Before (session 19) it was recorded as the public ops of ATen's composite, ``v * (g / ||v||)``; but for ``dim`` 0
or the last one torch's CPU runs a fused kernel whose sums run in another order, so the traced program was 1-3
ulps off eager (HuBERT, SEW, WavLM, UniSpeech: up to 9.5e-7, where torch.jit.trace answers eager's bits). The
fused kernel trusts ``g``'s size (a 1-element ``g`` corrupted the heap): a file's ``g`` is checked at load and
before every call (serialize/op_sizes_values.weight_norm; hostile rows below)."""
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
    jit = torch.jit.trace(model, (torch.randn(2, 4, 7),))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    x = torch.randn(3, 4, 11)
    want = model(x)
    assert torch.equal(traced(x), want)
    assert torch.equal(loaded(x), want)
    assert torch.equal(jit(x), want)   # torch.jit.trace records aten::_weight_norm too


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
        assert torch.equal(loaded(x)["last_hidden_state"], model(x).last_hidden_state)


@pytest.mark.parametrize("dim", [0, 2, 1])
def test_weight_norm_exports_to_onnx(dim):
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort
    model = _weight_normed("parametrization", dim)
    traced = tracejit.trace(model, (torch.randn(2, 4, 7),))
    session = ort.InferenceSession(tracejit.export_onnx(traced).SerializeToString(), providers=["CPUExecutionProvider"])
    x = torch.randn(2, 4, 7)
    got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-6)


def _hostile(g_shape, dim=2):
    """A saved weight-normed convolution whose g the file says is ``g_shape`` (CRC recomputed)."""
    from filesurgery import rewrite
    model = _weight_normed("parametrization", 2)
    buf = io.BytesIO()
    tracejit.save(tracejit.trace(model, (torch.randn(2, 4, 7),)), buf)

    def small_g(tensors):
        key = next(k for k in tensors if k.endswith("original0"))
        tensors[key] = torch.ones(g_shape)

    def edit(doc):
        for g in doc["program"]["graphs"]:
            for n in g["nodes"]:
                if n["op"] == "tracejit::get_attr" and n["outputs"][0]["shape"] == [1, 1, 3]:
                    n["outputs"][0]["shape"] = list(g_shape)
                if n["op"].startswith("aten::_weight_norm"):
                    n["args"][2] = dim
    return rewrite(buf.getvalue(), edit_doc=edit, edit_tensors=small_g)


@pytest.mark.parametrize("g_shape, dim", [((1,), 2), ((1, 1, 2), 2), ((2, 1, 1), 0)])
def test_a_file_whose_g_is_too_small_is_refused_before_the_kernel(g_shape, dim):
    """Before the check the fused kernel read and wrote past g (heap corruption: munmap_chunk(): invalid pointer).
    The submodule's graph still types its g input as traced ([1, 1, 3]): the load passes that, the call is
    refused; a dim that does not fit the traced g is refused at load."""
    raw = _hostile(g_shape, dim)
    if dim == 0:
        with pytest.raises(tracejit.LoadError, match=r"g \[1, 1, 3\] must hold one value per slice of v"):
            tracejit.load(io.BytesIO(raw))
        return
    loaded = tracejit.load(io.BytesIO(raw))
    with pytest.raises(tracejit.GuardError, match=r"aten::_weight_norm at .*must hold one value per slice of v"):
        loaded(torch.randn(2, 4, 9))


def test_a_g_that_follows_the_input_is_checked_at_each_call():
    def f(x, g):
        return torch._weight_norm(x, g[..., : x.shape[-1]], 2)

    traced = tracejit.trace(f, (torch.randn(4, 3, 5), torch.randn(1, 1, 8)))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    x, g = torch.randn(4, 3, 6), torch.randn(1, 1, 8)
    assert torch.equal(loaded(x, g), f(x, g))
    with pytest.raises(tracejit.GuardError, match="must hold one value per slice of v"):
        loaded(torch.randn(4, 3, 6), torch.randn(1, 1, 2))   # g[..., :6] holds 2: the kernel would read past it
