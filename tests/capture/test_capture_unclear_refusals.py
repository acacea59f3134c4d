"""Issue 20, item 6: the refusals that were unclear now work or say what to do."""
import io

import numpy as np
import pytest
import torch

import tracejit
from capture_testlib import assert_same, quiet_trace, round_trip


@pytest.mark.parametrize("scalar", [np.float64(1.5), np.float32(0.25), np.int64(3), np.sqrt(2.0)],
                         ids=["float64", "float32", "int64", "np.sqrt"])
def test_a_numpy_scalar_constant_runs_saves_and_loads(scalar):
    def f(x):
        return x * scalar + 1
    traced = quiet_trace(f, (torch.randn(3),))
    for x in (torch.randn(5), torch.randn(2, 3)):
        assert_same(traced(x), f(x), "in memory")
        assert_same(round_trip(traced)(x), f(x), "loaded")
    assert "np." not in traced.code


def test_torch_tensor_of_traced_sizes_saves_and_loads_symbolically():
    def f(x):
        sizes = torch.tensor([x.shape[0], x.shape[1] * 2])
        return x.sum() + sizes.float().sum()
    traced = quiet_trace(f, (torch.randn(3, 4),))
    loaded = round_trip(traced)
    zeros = torch.zeros(3, 4)
    assert not torch.equal(f(zeros), f(torch.zeros(5, 2)))   # the sizes move eager's answer
    for x in (torch.randn(5, 2), torch.randn(1, 7)):
        assert_same(loaded(x), f(x), "loaded on new sizes")


def test_new_tensor_is_refused_at_save_with_the_way_out():
    def f(x):
        return x + x.new_tensor([1.0, 2.0, 3.0])
    traced = quiet_trace(f, (torch.randn(3),))
    assert_same(traced(torch.randn(3)) * 0, torch.zeros(3))
    with pytest.raises(tracejit.SaveError, match=r"aten::new_tensor at .*test_capture_unclear_refusals.py:\d+ "
                                                 r"cannot be saved.*torch.tensor\(data, dtype=x.dtype"):
        tracejit.save(traced, io.BytesIO())


def test_an_uninitialized_lazy_module_is_a_clear_trace_error():
    model = torch.nn.Sequential(torch.nn.LazyLinear(4), torch.nn.ReLU())
    with pytest.raises(tracejit.TraceError, match=r"'0.weight' of LazyLinear '0' is not initialized yet.*call the "
                                                  r"module once"):
        tracejit.trace(model, (torch.randn(2, 3),))
    model(torch.randn(2, 3))   # initialized: it traces
    x = torch.randn(5, 3)
    assert_same(quiet_trace(model, (torch.randn(2, 3),))(x), model(x))


def test_a_module_retrace_runs_in_the_caller_s_grad_mode():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            if torch.is_grad_enabled():
                return self.lin(x) * 2
            return self.lin(x)

    m, x = M(), torch.randn(2, 3)
    traced = quiet_trace(m, (x,))
    with torch.no_grad():
        assert_same(traced(x), m(x), "no_grad: retraced under no_grad")
    assert_same(traced(x), m(x), "grad mode again")
    assert traced(x).requires_grad
