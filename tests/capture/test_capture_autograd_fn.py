"""Custom torch.autograd.Function (issue 10, item 5): called as itself in memory, so its backward runs;
a loaded program runs the forward's ops and refuses a gradient through it with a clear error."""
import pytest
import torch

import tracejit
from capture_testlib import assert_grads_equal, assert_same, quiet_trace, round_trip


class RoundSTE(torch.autograd.Function):      # the row: straight-through estimator
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return torch.round(x * scale)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


class ClampGrad(torch.autograd.Function):     # two outputs, saved tensors, a twice-differentiable backward
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w, (x * w).sum(-1)

    @staticmethod
    def backward(ctx, g, g_sum):
        x, w = ctx.saved_tensors
        g = g + g_sum[..., None]
        return (g * w).clamp(-1, 1) * x.sigmoid(), g * x


class PassThrough(torch.autograd.Function):   # forward returns its input as is (apply hands back a view)
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return 3 * g


def ste_model(x, w):
    return (RoundSTE.apply(x * w, 3.0) * w).sum(-1)  # @ste_line


def two_outputs(x, w):
    y, s = ClampGrad.apply(x, w)
    return y.tanh() + s[..., None]


def pass_through(x):
    return PassThrough.apply(x * 2) + 1


class Quantizer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(RoundSTE.apply(self.lin(x), 4.0))


CASES = [(ste_model, 2), (two_outputs, 2), (pass_through, 1)]


@pytest.mark.parametrize("fn,n", CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_custom_backward_runs_first_and_second_order(fn, n):
    example = tuple(torch.randn(2, 4) for _ in range(n))
    traced = quiet_trace(fn, example)
    inputs = [torch.randn(3, 4, dtype=torch.float64) for _ in range(n)]
    assert_same(traced(*inputs), fn(*inputs))
    assert_grads_equal(traced, fn, inputs)


def test_straight_through_gradient_equals_eager_where_the_forward_ops_give_zero():
    traced = quiet_trace(ste_model, (torch.randn(2), torch.randn(2)))
    x = torch.tensor([1.2, 3.4], requires_grad=True)
    w = torch.tensor([2.0, 1.5], requires_grad=True)
    traced(x, w).backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    ste_model(x, w).backward()
    torch.testing.assert_close((gx, gw), (x.grad, w.grad))
    assert gx.abs().sum() > 0                      # round's own derivative would give zeros
    jit = torch.jit.trace(ste_model, (torch.randn(2), torch.randn(2)))   # torch.jit.trace gets this right too
    x.grad = w.grad = None
    jit(x, w).backward()
    torch.testing.assert_close((gx, gw), (x.grad, w.grad))


def test_module_with_function_gradients_of_parameters_equal_eager():
    model = Quantizer().double()
    traced = quiet_trace(model, (torch.randn(2, 4, dtype=torch.float64),))
    x = torch.randn(5, 4, dtype=torch.float64)
    assert_grads_equal(traced, model, [x], list(traced.parameters()), list(model.parameters()))


def test_ledger_names_the_function_and_its_line_without_a_warning(recwarn):
    traced = tracejit.trace(ste_model, (torch.randn(2), torch.randn(2)))
    entries = [e for e in traced.ledger if e.kind == "autograd_function"]
    assert entries and entries[0].value == "RoundSTE"
    assert open(__file__).read().splitlines()[entries[0].lineno - 1].rstrip().endswith("# @ste_line")
    assert not [w for w in recwarn if issubclass(w.category, tracejit.TracerWarning)]
    assert "roundste = " in traced.code and ".apply(" in traced.code


@pytest.mark.parametrize("fn,n", CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_loaded_program_runs_inference_and_refuses_backward_through_the_function(fn, n):
    loaded = round_trip(quiet_trace(fn, tuple(torch.randn(2, 4) for _ in range(n))))
    inputs = [torch.randn(3, 4) for _ in range(n)]
    assert_same(loaded(*inputs), fn(*inputs))
    with torch.no_grad():
        assert_same(loaded(*inputs), fn(*inputs))
    grad_inputs = [x.clone().requires_grad_() for x in inputs]
    out = loaded(*grad_inputs)
    name = {ste_model: "RoundSTE", two_outputs: "ClampGrad", pass_through: "PassThrough"}[fn]
    with pytest.raises(RuntimeError, match=f"{name}.*loaded from a file.*no gradient"):
        out.sum().backward()


def test_loaded_program_graph_shows_the_function_and_its_forward_ops():
    loaded = round_trip(quiet_trace(ste_model, (torch.randn(2), torch.randn(2))))
    graph = str(loaded.graph)
    assert "tracejit::autograd_function[name='RoundSTE'" in graph and "aten::round" in graph


def test_backward_hooks_are_refused_with_torchs_class_and_text():
    model = Quantizer()
    model.register_full_backward_hook(lambda *a: None)
    with pytest.raises(ValueError, match="backward hooks"):
        torch.jit.trace(model, (torch.randn(2, 4),))
    # never dropped: refused (check_backward_hooks belongs to the compat work, which moves it to torch's ValueError)
    with pytest.raises((ValueError, RuntimeError), match="backward hook"):
        tracejit.trace(model, (torch.randn(2, 4),))


def test_loaded_module_with_function_in_forward_runs_and_refuses_backward():
    model = Quantizer()
    loaded = round_trip(quiet_trace(model, (torch.randn(2, 4),)))
    x = torch.randn(6, 4)
    with torch.no_grad():
        assert_same(loaded(x), model(x))
    with pytest.raises(RuntimeError, match="RoundSTE.*loaded from a file"):
        loaded(x).sum().backward()       # the parameters require grad: the gradient would cross RoundSTE


class DoubleInPlace(torch.autograd.Function):   # writes its input in place and says so (mark_dirty)
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return 2 * g


def doubled_in_place(a):
    y = a * 1.5
    z = DoubleInPlace.apply(y)
    return z + y, y


def test_a_function_that_writes_its_input_in_place_equals_eager_where_torch_jit_refuses():
    """Before, the call's argument was read after the forward had rebound it to its in-place op (which the
    in-memory program skips): code generation failed with an internal KeyError. torch.jit.trace refuses it
    ("inplace DoubleInPlace not supported in the JIT")."""
    traced = quiet_trace(doubled_in_place, (torch.randn(3),))
    a = torch.randn(5, dtype=torch.float64)
    assert_same(traced(a), doubled_in_place(a))
    assert_grads_equal(traced, doubled_in_place, [a])
    x = torch.randn(4)
    eager_x, traced_x = x.clone(), x.clone()

    def writes_caller(t):
        return DoubleInPlace.apply(t) + 1
    traced_writes = quiet_trace(writes_caller, (torch.randn(4),))
    assert_same(traced_writes(traced_x), writes_caller(eager_x))
    assert torch.equal(traced_x, eager_x) and torch.equal(traced_x, x * 2)   # the caller's tensor written, as eager
    with torch.no_grad():
        assert_same(round_trip(traced)(a), doubled_in_place(a))
    with pytest.raises(torch.jit.TracingCheckError, match="inplace DoubleInPlace not supported"):
        torch.jit.trace(doubled_in_place, (torch.randn(3),))
