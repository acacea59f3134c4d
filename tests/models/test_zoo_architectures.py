"""The bench zoo's architectures that broke (bench/bench_zoo.py, issue #25 items 3 and 4), small instances,
random weights, BatchNorm statistics randomised: the optimized program and the exported ONNX model
(onnxruntime) give eager's answer on NEW inputs (another batch, another image or sequence size), at
least as closely as torch.jit's freeze + optimize_for_inference does on the same inputs.

- Inception-v3: conv + batch-norm folding rounded the folded weights twice (its optimized error was
  1.9x torch.jit freeze's);
- Swin-T: the shifted-window mask filled through slices failed to export;
- AlexNet: adaptive average pooling to 6x6 (and VGG's to 7x7) did not export (torch.jit's freeze and
  torch.onnx's legacy exporter fail on it too);
- DeBERTa-v2: ``torch.tensor(number)`` did not export.
"""
from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
from torch import nn

import tracejit

from torchvision_ops import import_torchvision

SLACK, ULPS = 1.25, 8   # as bench_zoo.EXACT_SLACK: two fp32 reassociations differ by chance

needs_onnx = pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")


def _randomise_batch_norm(model: nn.Module) -> nn.Module:
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=gen) * 1.5 + 0.5)
                m.weight.copy_(1 + torch.randn(n, generator=gen) * 0.2)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.1)
    return model.eval()


def _torchvision():
    tv = import_torchvision()
    if tv is None:
        pytest.skip("torchvision is not installed (make test installs it)")
    return tv


def _jit_frozen(model, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, example).eval()))
        except RuntimeError:
            return None   # torch.jit's freeze cannot run this model (AlexNet's adaptive pooling)


def _jit_error(jit, inputs, want) -> float:
    """torch.jit freeze's error on ``inputs``; 0 where it cannot run them (the bound is then eager's
    within a few ulps)."""
    if jit is None:
        return 0.0
    try:
        return _error(jit(*inputs), want)
    except RuntimeError:
        return 0.0   # AlexNet's adaptive pooling: "input size is not divisible by the output size"


def _error(got, want) -> float:
    return (got.double() - want.double()).abs().max().item()


def check(model, example, new_inputs, *, onnx=True):
    """Optimized (and exported) tracejit against eager and torch.jit freeze on each of ``new_inputs``."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, example)
        programs = {"optimized": tracejit.optimize_for_inference(traced)}
        if onnx:
            programs["onnxruntime"] = tracejit.optimize_for_inference(traced, backend="onnxruntime")
        jit = _jit_frozen(model, example)
        first, second = (model(*i)[:1].flatten() for i in new_inputs[:2])
        k = min(first.numel(), second.numel())
        assert not torch.allclose(first[:k], second[:k]), "the new inputs must move eager's answer"
        for inputs in new_inputs:
            want = model(*inputs)
            scale = want.abs().max().item()
            jit_err = _jit_error(jit, inputs, want)
            bound = SLACK * jit_err + ULPS * torch.finfo(torch.float32).eps * max(scale, 1.0)
            for name, program in programs.items():
                got = program(*inputs)
                assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)}, eager {tuple(want.shape)}"
                err = _error(got, want)
                assert err <= bound, (f"{name} differs from eager by {err:.3g} on {tuple(inputs[0].shape)}; torch.jit "
                                      f"freeze by {jit_err:.3g} (bound {bound:.3g}, output scale {scale:.3g})")


@pytest.mark.slow
def test_inception_v3_optimized_as_exact_as_jit_freeze():
    tv = _torchvision()
    torch.manual_seed(0)
    model = _randomise_batch_norm(tv.models.inception_v3(weights=None, aux_logits=False, init_weights=True,
                                                         num_classes=10))
    gen = torch.Generator().manual_seed(1)
    example = (torch.randn(1, 3, 80, 80, generator=gen),)
    check(model, example, [(torch.randn(2, 3, 96, 88, generator=gen),), (torch.randn(1, 3, 80, 80, generator=gen),)],
          onnx=False)


@needs_onnx
def test_swin_exports_and_follows_new_image_sizes():
    _torchvision()
    from torchvision.models.swin_transformer import SwinTransformer
    torch.manual_seed(0)
    model = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4],
                            num_classes=10).eval()
    gen = torch.Generator().manual_seed(2)
    check(model, (torch.randn(1, 3, 64, 64, generator=gen),),
          [(torch.randn(3, 3, 80, 72, generator=gen),), (torch.randn(2, 3, 48, 56, generator=gen),)])


@needs_onnx
@pytest.mark.slow
def test_alexnet_adaptive_pooling_exports():
    tv = _torchvision()
    torch.manual_seed(0)
    model = tv.models.alexnet(weights=None, num_classes=10).eval()
    gen = torch.Generator().manual_seed(3)
    check(model, (torch.randn(1, 3, 64, 64, generator=gen),),
          [(torch.randn(2, 3, 64, 64, generator=gen),), (torch.randn(1, 3, 100, 120, generator=gen),)])


@needs_onnx
def test_deberta_v2_exports_and_follows_new_lengths():
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.DebertaV2Config(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                          intermediate_size=64, max_position_embeddings=64, relative_attention=True,
                                          pos_att_type=["p2c", "c2p"], position_buckets=8, max_relative_positions=16)
    deberta = transformers.DebertaV2Model(config).eval()

    class Hidden(nn.Module):
        def __init__(self):
            super().__init__()
            self.deberta = deberta

        def forward(self, ids, mask):
            return self.deberta(input_ids=ids, attention_mask=mask, return_dict=False)[0]

    gen = torch.Generator().manual_seed(4)

    def inputs(batch, length):
        mask = torch.ones(batch, length, dtype=torch.long)
        mask[:, -2:] = 0
        return torch.randint(0, 500, (batch, length), generator=gen), mask

    check(Hidden().eval(), inputs(1, 12), [inputs(3, 20), inputs(2, 7)])
