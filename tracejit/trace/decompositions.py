"""Builtin torch functions the recorder records as the public ops they compute, not as themselves.

``torch._weight_norm(v, g, dim)`` (``nn.utils.weight_norm`` and its parametrization: wav2vec2's and HuBERT's
positional convolution) is a private ATen op that a saved file may not name (serialize/op_allowlist.py: on
CUDA it reaches ``_weight_norm_interface``, a kernel that trusts its arguments). Recorded instead: what ATen's
own composite computes, ``v * (g / ||v||)`` with the norm over every dimension but ``dim`` (all of them
when ``dim`` is -1), which every backend, file and ONNX model can hold.

>>> import torch, tracejit
>>> conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 4, 3), dim=2)
>>> traced = tracejit.trace(conv, (torch.randn(2, 4, 9),))
>>> "_weight_norm" in traced.code
False
>>> x = torch.randn(3, 4, 5)
>>> torch.testing.assert_close(traced(x), conv(x))
"""
from __future__ import annotations

import torch


def weight_norm(v: torch.Tensor, g: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """``torch._weight_norm(v, g, dim)`` in public ops (ATen's ``_weight_norm`` composite)."""
    if dim == -1:
        norm = torch.linalg.vector_norm(v)
    else:
        dim = dim % v.dim()
        others = [d for d in range(v.dim()) if d != dim]
        norm = torch.linalg.vector_norm(v, 2, dim=others, keepdim=True) if others else v.abs()
    return v * (g / norm)


DECOMPOSED = {"_weight_norm": weight_norm}


def of(func, name: str):
    """The public-op function that computes builtin ``func`` (named ``name``), or None."""
    fn = DECOMPOSED.get(name)
    return fn if fn is not None and getattr(torch, name, None) is func else None
