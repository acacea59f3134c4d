"""The activations oneDNN applies inside a convolution or a linear (its "post-ops"), and the torch
op each stands for: the kernels' fallback runs that op, so both paths give torch's answer.

``ACTIVATIONS[name] = (oneDNN attr, oneDNN algorithm, torch function of (y, *scalars))``; the
scalars (hardtanh's bounds, leaky_relu's slope) travel with the kernel.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

ACTIVATIONS = {
    "none": ("none", "", None),
    "relu": ("relu", "", torch.relu),
    "gelu": ("gelu", "none", F.gelu),
    "gelu_tanh": ("gelu", "tanh", lambda y: F.gelu(y, approximate="tanh")),
    "silu": ("swish", "", F.silu),
    "hardtanh": ("hardtanh", "", F.hardtanh),               # scalars: min, max (ReLU6: 0, 6)
    "hardswish": ("hardswish", "", F.hardswish),
    "hardsigmoid": ("hardsigmoid", "", F.hardsigmoid),
    "sigmoid": ("sigmoid", "", torch.sigmoid),
    "tanh": ("tanh", "", torch.tanh),
    "leaky_relu": ("leaky_relu", "", F.leaky_relu),         # scalars: negative slope
}

# oneDNN computes these as max / clip: a NaN comes out as a number (relu(NaN) == 0, measured), where
# torch's op keeps it. Programs with such kernels check their inputs are finite (backends/fallback.py).
NAN_TO_NUMBER = frozenset({"relu", "hardtanh", "hardsigmoid"})


def recorded(name: str, y, scalars: tuple):
    """The torch op the activation ``name`` stands for, applied to ``y``."""
    fn = ACTIVATIONS[name][2]
    return y if fn is None else fn(y, *scalars)


def label(name: str) -> str:
    return "" if name == "none" else "+" + name
