"""Grad-mode regions inside traced code (issue 10, item 4) and free tensors that require grad."""
import pytest
import torch

import tracejit
from capture_testlib import assert_grads_equal, assert_same, quiet_trace, round_trip


class FrozenLayer(torch.nn.Module):          # the row: a layer used under no_grad in forward
    def __init__(self):
        super().__init__()
        self.frozen = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        with torch.no_grad():
            h = self.frozen(x)
        return self.head(h * x)


class DecoratedHelper(torch.nn.Module):      # @torch.no_grad() on a helper method (EMA teachers, codebooks)
    def __init__(self):
        super().__init__()
        self.codebook = torch.nn.Parameter(torch.randn(5, 4))
        self.proj = torch.nn.Linear(4, 4)

    @torch.no_grad()
    def nearest(self, h):
        return torch.cdist(h, self.codebook).argmin(-1)

    def forward(self, x):
        h = self.proj(x)
        q = self.codebook[self.nearest(h)]
        return h + (q - h).detach()              # straight-through with detach


class SetGradEnabled(torch.nn.Module):       # torch.set_grad_enabled(False) block and a bare call restored
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.set_grad_enabled(False):
            stat = self.a(x).mean(0, keepdim=True)
        return self.b(x) * stat + self.b(x).pow(2)


class InferenceStat(torch.nn.Module):        # torch.inference_mode() for a statistic
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.inference_mode():
            scale = x.abs().amax()
        return self.a(x) * (scale.clone() + 1.0)


class EnableGradInside(torch.nn.Module):     # torch.enable_grad() inside: grads even when called under no_grad
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.enable_grad():
            y = self.a(x).tanh()
        return y


class SharedLayerTwoModes(torch.nn.Module):  # one submodule called with and without grad: two methods
    def __init__(self):
        super().__init__()
        self.shared = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            target = self.shared(x)
        return (self.shared(x) - target).pow(2)


MODULES = [FrozenLayer, DecoratedHelper, SetGradEnabled, InferenceStat, SharedLayerTwoModes]


def _params(m):
    return [p for p in m.parameters()]


@pytest.mark.parametrize("cls", MODULES, ids=lambda c: c.__name__)
def test_gradients_of_parameters_and_inputs_equal_eager_first_and_second_order(cls):
    torch.manual_seed(0)
    model = cls().double()
    traced = quiet_trace(model, (torch.randn(3, 4, dtype=torch.float64),))
    x = torch.randn(6, 4, dtype=torch.float64)
    assert_same(traced(x), model(x), cls.__name__)
    assert_grads_equal(traced, model, [x], _params(traced), _params(model))


@pytest.mark.parametrize("cls", MODULES, ids=lambda c: c.__name__)
def test_which_tensors_require_grad_matches_eager(cls):
    model = cls()
    traced = quiet_trace(model, (torch.randn(3, 4),))
    x = torch.randn(5, 4, requires_grad=True)
    assert traced(x).requires_grad == model(x).requires_grad


def test_no_grad_layer_gets_no_gradient_where_torch_jit_trace_gives_it_one():
    model = FrozenLayer()
    traced = quiet_trace(model, (torch.randn(3, 4),))
    traced(torch.randn(5, 4)).sum().backward()
    assert model.frozen.weight.grad is None and model.head.weight.grad is not None
    model.zero_grad(set_to_none=True)
    jit = torch.jit.trace(FrozenLayer(), (torch.randn(3, 4),))
    jit(torch.randn(5, 4)).sum().backward()
    assert jit.frozen.weight.grad is not None        # torch.jit.trace drops the region (documented, wrong)
    assert "with torch.no_grad():" in traced.code


def test_enable_grad_region_builds_graph_under_outer_no_grad_like_eager():
    model = EnableGradInside()
    traced = quiet_trace(model, (torch.randn(3, 4),))
    with torch.no_grad():
        eager_out, traced_out = model(torch.randn(2, 4)), traced(torch.randn(2, 4))
    assert traced_out.requires_grad and eager_out.requires_grad
    assert "with torch.enable_grad():" in traced.code


def test_inference_region_replays_as_inference_mode():
    model = InferenceStat()
    traced = quiet_trace(model, (torch.randn(3, 4),))
    assert "with torch.inference_mode():" in traced.code
    x = torch.randn(5, 4, requires_grad=True)
    assert_same(traced(x), model(x))
    assert "with torch.no_grad():" in quiet_trace(SetGradEnabled(), (torch.randn(3, 4),)).code


def test_bare_set_grad_enabled_call_is_replayed():
    def fn(x, w):
        torch.set_grad_enabled(False)
        stat = (x * w).sum()
        torch.set_grad_enabled(True)
        return x * w + stat
    traced = quiet_trace(fn, (torch.randn(3), torch.randn(3)))
    assert_grads_equal(traced, fn, [torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)])


def test_grad_regions_survive_save_and_load():
    model = FrozenLayer()
    loaded = round_trip(quiet_trace(model, (torch.randn(3, 4),)))
    x = torch.randn(5, 4)
    loaded(x).sum().backward()
    assert all(p.grad is None for n, p in loaded.named_parameters() if n.startswith("frozen"))
    assert all(p.grad is not None for n, p in loaded.named_parameters() if n.startswith("head"))
    assert "grad='no_grad'" in str(loaded.graph)


FREE = torch.randn(4, requires_grad=True)


def uses_free_tensor(x):                     # the row: a global tensor that requires grad
    return x * FREE  # @free_line


def test_free_tensor_that_requires_grad_is_refused_like_torch_jit_trace():
    with pytest.raises(RuntimeError) as jit_error:
        torch.jit.trace(uses_free_tensor, (torch.randn(4),))
    with pytest.raises(tracejit.TraceError, match="Cannot insert a Tensor that requires grad as a constant") as ours:
        tracejit.trace(uses_free_tensor, (torch.randn(4),))
    assert isinstance(ours.value, type(jit_error.value))          # the same error class (RuntimeError)
    assert "@free_line" in open(__file__).read().splitlines()[int(str(ours.value).split(".py:")[1].split()[0]) - 1]


def test_free_tensor_is_fine_under_no_grad():
    def fn(x):
        with torch.no_grad():
            return x * FREE
    traced = quiet_trace(fn, (torch.randn(4),))
    x = torch.randn(4)
    assert_same(traced(x), fn(x))


class AutocastBlock(torch.nn.Module):        # mixed precision inside forward (autocast regions)
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.a(x)
            with torch.autocast("cpu", enabled=False):
                g = self.b(x)
        return h.float() + g


def test_autocast_region_is_replayed():
    model = AutocastBlock()
    traced = quiet_trace(model, (torch.randn(3, 4),))
    x = torch.randn(5, 4)
    assert_same(traced(x), model(x))
    assert "torch.autocast('cpu', dtype=torch.bfloat16)" in traced.code
    assert "torch.autocast('cpu', enabled=False)" in traced.code
    jit = torch.jit.trace(AutocastBlock(), (torch.randn(3, 4),))
    jit.load_state_dict(model.state_dict())
    assert torch.equal(jit(x), model(x))          # torch.jit.trace records the casts autocast inserts: right too
    loaded = round_trip(traced)
    assert_same(loaded(x), model(x))


def test_autocast_region_gradients_equal_eager():
    model = AutocastBlock()
    traced = quiet_trace(model, (torch.randn(3, 4),))
    x = torch.randn(5, 4)
    assert_grads_equal(traced, model, [x], _params(traced), _params(model))
