"""Two traced sizes compared with each other: the trace guards the relation (``size == size_4``), not either value.
The marked lines are where a relation is read."""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn


class FuseIfShapesDiffer(nn.Module):
    """DPT's / Depth Anything's fusion: ``if hidden_state.shape != residual.shape: residual = interpolate(...)``."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(4, 4, 1)

    def forward(self, hidden, residual):
        if hidden.shape != residual.shape:   # @shapes_differ
            residual = F.interpolate(residual, size=(hidden.shape[2], hidden.shape[3]), mode="bilinear")
        return self.proj(hidden + residual)


class CropToShorter(nn.Module):
    """``a[: b.size(0)] if a.size(0) > b.size(0) else a``: an order between two sizes."""

    def forward(self, a, b):
        if a.size(0) > b.size(0):   # @longer
            a = a[: b.size(0)]
        return a * 2
