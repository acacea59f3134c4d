"""A tensor a submodule computed that reaches its caller other than through the submodule's return value (a list
or dict passed in, a hook's store) is known to the caller: forward is recorded again with that submodule's call
traced through in place (trace/escapes.py finds the escape, trace/attempts.py runs again). Before session 27 the
recorder froze it as a constant (under ``no_grad`` the example's tensor at every call of the same shape, silently);
session 27 refused it. Where the first run changed state a caller sees (an in-place write, an attribute), running
forward again would apply it twice: that escape stays a TraceError naming the write."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit
from escape_models import HandsOut, Inner


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


def _same_as_eager(model, traced, *inputs):
    out, ref = traced(*inputs), model(*inputs)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    return out, ref


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("model_type", [ListOuter, DictOuter, Deep])
def test_a_tensor_handed_out_through_a_list_or_dict_gives_eagers_answer_on_new_inputs(grad, model_type):
    torch.manual_seed(0)
    model = model_type().eval()
    x = torch.randn(2, 4)
    with torch.set_grad_enabled(grad):
        traced = tracejit.trace(model, x)
        for n in (2, 5):
            x2 = torch.randn(n, 4)
            assert not torch.allclose(model(x2)[:1], model(x)[:1])   # the input moves the answer
            _same_as_eager(model, traced, x2)


def test_gradients_flow_through_the_handed_out_tensor_as_in_eager():
    torch.manual_seed(0)
    model = ListOuter().eval()
    traced = tracejit.trace(model, torch.randn(2, 4))
    x = torch.randn(3, 4, requires_grad=True)
    traced(x).pow(2).sum().backward()
    got_x, got_w = x.grad.clone(), model.inner.lin.weight.grad.clone()
    x.grad = None
    model.zero_grad()
    model(x).pow(2).sum().backward()
    torch.testing.assert_close(got_x, x.grad)
    torch.testing.assert_close(got_w, model.inner.lin.weight.grad)


def test_the_submodule_is_traced_through_and_its_own_submodules_stay_calls():
    model = ListOuter().eval()
    with torch.no_grad():
        traced = tracejit.trace(model, torch.randn(2, 4))
    assert "self._modules['inner']._modules['lin']" in traced.code
    assert "self._modules['inner'].forward" not in traced.code
    with pytest.raises(RuntimeError, match="traced through into its caller's graph"):
        traced.inner(torch.randn(2, 4), [])
    assert traced.inner.lin(torch.randn(1, 4)).shape == (1, 4)   # its own submodule keeps its traced forward


class Counting(nn.Module):
    """Counts its calls in a buffer, in place, then hands a tensor out through the caller's list."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x, store):
        self.calls.add_(1)
        store.append(self.lin(x))
        return x


def test_an_escape_after_an_in_place_write_is_refused_naming_the_write_and_applied_once():
    model = HandsOut(Counting()).eval()
    with torch.no_grad(), pytest.raises(tracejit.TraceError) as info:
        tracejit.trace(model, torch.randn(2, 4))
    message = str(info.value)
    assert "computed inside submodule 'inner'" in message and "escape_models.py:" in message   # the line that read it
    assert "'inner.calls' was written in place" in message
    assert model.inner.calls.item() == 1   # one run, as one eager call: not two


class Noisy(nn.Module):
    def forward(self, x, store):
        store.append(x * torch.rand(()))
        return x


class NoisyOuter(nn.Module):
    def __init__(self, noisy=True):
        super().__init__()
        self.inner = Noisy() if noisy else Ledgered()

    def forward(self, x):
        store = []
        y = self.inner(x, store)
        if x.sum() > -1e9:   # a value read: a TracerWarning, from the first run
            y = y + 1
        return y + store[0]


class Ledgered(nn.Module):
    def forward(self, x, store):
        store.append(x * 3)
        return x


def test_an_escape_after_a_random_draw_traces_and_the_generator_advanced_once():
    """hunt30: the second run draws privately (tests/trace/test_second_run_draws.py); it used to be refused."""
    torch.manual_seed(3)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracejit.trace(NoisyOuter(), torch.ones(2), check_trace=False)
    after_trace = torch.rand(())
    torch.manual_seed(3)
    torch.rand(())   # what one eager call draws
    assert torch.equal(after_trace, torch.rand(()))   # one run, as one eager call


def test_a_run_again_warns_once():
    with torch.no_grad(), pytest.warns(torch.jit.TracerWarning) as caught:
        traced = tracejit.trace(NoisyOuter(noisy=False), torch.ones(2), check_trace=False)
    texts = [str(w.message) for w in caught if "boolean" in str(w.message)]
    assert len(texts) == 1, texts
    x = torch.randn(4)
    torch.testing.assert_close(traced(x), x + 1 + 3 * x)


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


def test_an_escape_the_traced_code_catches_is_still_traced_through():
    class Catching(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Ledgered()

        def forward(self, x):
            store = []
            y = self.inner(x, store)
            try:   # tracejit's error about the escape is caught here in the first run: the run is not kept
                y = y + store[0]
            except Exception:
                y = y - 100
            return y

    model = Catching()
    with torch.no_grad():
        traced = tracejit.trace(model, torch.ones(2))
        x = torch.randn(3)
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)


def test_an_escape_after_a_scratch_attribute_write_is_traced_through():
    class Remembers(nn.Module):
        def forward(self, x, store):
            self.rows = x.shape[0]   # written before any read in the call: scratch, the next run writes it first
            store.append(x * self.rows)
            return x

    model = HandsOut(Remembers())
    with torch.no_grad():
        traced = tracejit.trace(model, torch.ones(2, 3))
        x = torch.randn(5, 3)
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
