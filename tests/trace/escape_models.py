"""Test models for tensors handed out of a submodule call another way than its return value (trace/escapes.py,
trace/attempts.py), shared by the tests of tests/trace."""
from __future__ import annotations

from torch import nn


class HandsOut(nn.Module):
    """Calls ``inner(x, store)`` with a fresh list and adds the first tensor the call appended to it."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        store = []
        return self.inner(x, store) + store[0]


class Inner(nn.Module):
    """A linear layer whose output, doubled, is handed out through the caller's list."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, store):
        h = self.lin(x)
        store.append(h * 2)   # handed out through the caller's list: the escape that runs forward again
        return h
