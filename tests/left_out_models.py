"""A model whose submodule's trace holds a Python object that is not data (as transformers hands its cache to a
decoder layer): save leaves that method out of the file (serialize/left_out.py). Shared by
tests/serialize/test_left_out_methods.py and tests/security/catalogue_round28.py."""
from __future__ import annotations

import torch
from torch import nn


class Cache:
    """A Python object handed to a submodule, as transformers hands its cache to a decoder layer."""

    def __init__(self, scale: float):
        self.scale = scale


class Layer(nn.Module):
    def __init__(self, width: int = 8):
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x, cache=None):
        return torch.relu(self.lin(x)) * cache.scale


class LeftOutModel(nn.Module):
    """``layer.forward`` holds a Cache: the file leaves it out; ``head`` keeps its method."""

    def __init__(self, width: int = 8, outputs: int = 4):
        super().__init__()
        self.layer = Layer(width)
        self.head = nn.Linear(width, outputs)
        self.cache = Cache(1.5)

    def forward(self, x):
        return self.head(self.layer(x, cache=self.cache) + x)
