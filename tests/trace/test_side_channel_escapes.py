"""A tensor a submodule computed that reaches its caller other than through the submodule's return value is
refused at trace time with the line and the submodule's path (trace/escapes.py). Before, the recorder froze it as a
constant: under ``no_grad`` the program answered the example's tensor at every call of the same shape (silently)
and failed at another shape; with grad on, torch.jit's "insert a Tensor that requires grad" message hid the cause."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, store):
        h = self.lin(x)
        store.append(h * 2)   # handed out through the caller's list
        return h


class ListOuter(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        store = []
        y = self.inner(x, store)
        return y + store[0]


class Leaf(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, seen):
        h = self.lin(x)
        seen["leaf"] = h.exp()
        return h


class Mid(nn.Module):
    def __init__(self):
        super().__init__()
        self.leaf = Leaf()

    def forward(self, x, seen):
        return self.leaf(x, seen) * 2


class Deep(nn.Module):
    """Two levels down: a grandchild's tensor reaches the root through a dict both levels pass on."""

    def __init__(self):
        super().__init__()
        self.mid = Mid()

    def forward(self, x):
        seen = {}
        y = self.mid(x, seen)
        return y - seen["leaf"]


class DictOuter(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4))
        self.wrap = Wrap(self.inner)

    def forward(self, x):
        cache = {}
        y = self.wrap(x, cache)
        return y * cache["pre"]


class Wrap(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, cache):
        h = self.inner(x)
        cache["pre"] = torch.sigmoid(h)
        return h


@pytest.mark.parametrize("grad", [False, True])
def test_a_tensor_handed_out_through_a_list_is_refused_with_the_submodule_and_the_line(grad):
    model = ListOuter().eval()
    x = torch.randn(2, 4)
    with torch.set_grad_enabled(grad), pytest.raises(tracejit.TraceError) as info:
        tracejit.trace(model, x)
    message = str(info.value)
    assert "computed inside submodule 'inner'" in message and "return value" in message
    assert "test_side_channel_escapes.py:" in message
    # eager answers a new input with new values: the frozen constant would not
    with torch.no_grad():
        x2 = torch.randn(2, 4)
        assert not torch.allclose(model(x2), model(x))


@pytest.mark.parametrize("model, path", [(DictOuter, "wrap"), (Deep, "mid.leaf")])
def test_a_tensor_handed_out_through_a_dict_is_refused(model, path):
    with torch.no_grad(), pytest.raises(tracejit.TraceError, match=f"computed inside submodule '{path}'"):
        tracejit.trace(model().eval(), torch.randn(3, 4))


def test_returned_tensors_and_python_values_handed_out_still_trace():
    class Counted(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x, notes):
            notes.append(x.shape[0] > 0)   # a Python value, not a tensor: guarded as before
            return self.lin(x), self.lin(x).sum()

    class Caller(nn.Module):
        def __init__(self):
            super().__init__()
            self.sub = Counted()

        def forward(self, x):
            notes = []
            h, s = self.sub(x, notes)
            return h * s if notes[0] else h

    model = Caller().eval()
    with torch.no_grad():
        traced = tracejit.trace(model, torch.randn(2, 4))
        for n in (2, 5):
            x = torch.randn(n, 4)
            torch.testing.assert_close(traced(x), model(x))
