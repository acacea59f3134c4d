"""backends/torch_kernels.py: the lean ``__call__`` of freeze / optimize_for_inference results keeps
every promise of the full one: hooks (also added later), errors, guards, keyword arguments."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.errors import ArgumentTypeError, GuardError
from tracejit.backends.torch_kernels import FastTracedFunction, FastTracedModule

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval()


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x, *, scale):
        return self.lin(x) * scale


@pytest.fixture(params=["freeze", "optimize_for_inference"])
def build(request):
    return getattr(tracejit, request.param)


def test_results_are_fast_and_match_eager_and_jit(build):
    m = model()
    fast = build(tracejit.trace(m, (torch.randn(1, 8),)))
    assert isinstance(fast, FastTracedModule)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = torch.jit.trace(m, torch.randn(1, 8))
    with torch.no_grad():
        for x in (torch.randn(3, 8), torch.randn(1, 8)):
            torch.testing.assert_close(fast(x), m(x), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(fast(x), ref(x), rtol=1e-4, atol=1e-5)


def test_hooks_registered_after_building_run(build):
    m = model()
    fast = build(tracejit.trace(m, (torch.randn(1, 8),)))
    x = torch.randn(2, 8)
    plain = fast(x)
    handle = fast.register_forward_hook(lambda mod, args, out: out + 1)
    pre = fast.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    torch.testing.assert_close(fast(x), m(x * 2) + 1, rtol=1e-4, atol=1e-5)
    handle.remove()
    pre.remove()
    torch.testing.assert_close(fast(x), plain)


def test_call_errors_and_guards_are_the_full_paths(build):
    m = model()
    traced = tracejit.trace(m, (torch.randn(1, 8),))
    fast = build(traced)
    with pytest.raises(ArgumentTypeError) as fast_err:
        fast(torch.randn(1, 8), torch.randn(1, 8))
    with pytest.raises(ArgumentTypeError) as full_err:
        traced(torch.randn(1, 8), torch.randn(1, 8))
    assert str(fast_err.value) == str(full_err.value)
    with pytest.raises(ArgumentTypeError, match="argument 'input' should be a Tensor"):
        fast([1.0] * 8)
    fast.train()
    with pytest.raises(GuardError, match="traced in eval mode"):
        fast(torch.randn(1, 8))


def test_keyword_traced_arguments_by_keyword_and_by_position(build):
    m = Scaled().eval()
    traced = tracejit.trace(m, example_kwarg_inputs={"x": torch.randn(1, 8), "scale": torch.tensor(2.0)})
    fast = build(traced)
    x, s = torch.randn(3, 8), torch.tensor(3.0)
    with torch.no_grad():
        torch.testing.assert_close(fast(x=x, scale=s), m(x, scale=s), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(fast(x, s), m(x, scale=s), rtol=1e-4, atol=1e-5)


def test_functions_get_the_fast_call_too(build):
    def f(x, y):
        return torch.sin(x) * 2 + y

    traced = tracejit.trace(f, (torch.randn(3), torch.randn(3)))
    fast = build(traced)
    assert isinstance(fast, FastTracedFunction)
    x, y = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(fast(x, y), f(x, y))
    with pytest.raises(ArgumentTypeError) as fast_err:
        fast(x)
    with pytest.raises(ArgumentTypeError) as full_err:
        traced(x)
    assert str(fast_err.value) == str(full_err.value)
    with pytest.raises(ArgumentTypeError, match="argument 'y' should be a Tensor"):
        fast(x, "y")
