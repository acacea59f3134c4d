"""What the zoo architecture tests share (test_zoo_architectures.py, test_timm_models.py): ``check`` runs the
optimized program (and the onnxruntime one) on new inputs against eager, bounded by torch.jit freeze's error on
the same inputs (bench_zoo.EXACT_SLACK)."""
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


def randomise_batch_norm(model: nn.Module) -> nn.Module:
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


def torchvision_or_skip():
    tv = import_torchvision()
    if tv is None:
        pytest.skip("torchvision is not installed (make test installs it)")
    return tv


def _jit_frozen(model, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            # check_trace=False: the reference's own re-trace check is not what these tests compare (about 1 s a model)
            traced = torch.jit.trace(model, example, check_trace=False)
            return torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))
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
