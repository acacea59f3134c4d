"""Outputs (tensors, nested tuples, namedtuples, None, dicts, lists), in-place ops and views
replayed with eager's aliasing, _force_outplace, and autograd through traced programs.
"""
import collections
import copy
import re
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import tracejit

Result = collections.namedtuple("Result", "main extra")


def assert_moves(out1, out2, margin=1e-2):
    """The outputs for two different inputs differ by far more than the comparison tolerance."""
    assert out1.shape != out2.shape or (out1 - out2).abs().max().item() > margin


def assert_same(actual, expected, tol=1e-5):
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


def assert_same_structure(actual, expected):
    """Same container types all the way down (namedtuple types included), None where eager has None,
    and equal tensors at the leaves."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        assert_same(actual, expected)
    elif expected is None:
        assert actual is None
    elif isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys())
        for k in expected:
            assert_same_structure(actual[k], expected[k])
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same_structure(a, e)
    else:
        assert actual == expected


# ---------------------------------------------------------------------------------------------
# outputs
# ---------------------------------------------------------------------------------------------

def _nested_out(x, y):
    s = x * y
    return s.exp(), ((s - y, None), (x.sum(0),)), Result(main=s.tanh(), extra=(None, y.t()))


def test_nested_tuple_namedtuple_and_none_outputs():
    torch.manual_seed(0)
    traced = tracejit.trace(_nested_out, (torch.randn(2, 3), torch.randn(2, 3)))
    x, y = torch.randn(5, 4), torch.randn(5, 4)
    expected = _nested_out(x, y)
    assert_moves(expected[2].main, _nested_out(x + 1, y)[2].main)
    out = traced(x, y)
    assert type(out[2]) is Result
    assert out[1][0][1] is None and out[2].extra[0] is None
    assert_same_structure(out, expected)


class NamedOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        h = self.lin(x)
        return Result(h.relu(), (None, h.sum(-1)))


class UsesNamedOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = NamedOut()

    def forward(self, x):
        r = self.sub(x)
        return Result(r.main * 2, r.extra), None


def test_namedtuple_output_of_module_and_submodule():
    torch.manual_seed(0)
    m = UsesNamedOut()
    traced = tracejit.trace(m, torch.randn(2, 3))
    x = torch.randn(7, 3)
    expected = m(x)
    assert_moves(expected[0].extra[1], m(x * 2)[0].extra[1])
    out = traced(x)
    assert_same_structure(out, expected)
    assert type(traced.sub(x)) is Result


def test_output_that_is_an_input_is_returned_as_is():
    torch.manual_seed(0)

    def f(x, y):
        return x, y * 2

    traced = tracejit.trace(f, (torch.randn(2), torch.randn(2)))
    x, y = torch.randn(5), torch.randn(5)
    out = traced(x, y)
    assert out[0] is x
    assert_moves(f(x, y)[1], f(x, y + 1)[1])
    assert_same(out[1], f(x, y)[1])


def _dict_out(x):
    return {"double": x * 2, "pair": (x.sin(), None), "inner": {"neg": -x}}


def test_dict_output_with_strict_raises_runtime_error():
    torch.manual_seed(0)
    with pytest.raises(RuntimeError, match="strict=False"):   # torch.jit's class (issue 9)
        tracejit.trace(_dict_out, torch.randn(3))


def test_dict_output_with_strict_false_keeps_structure():
    torch.manual_seed(0)
    traced = tracejit.trace(_dict_out, torch.randn(3), strict=False)
    x = torch.randn(8)
    expected = _dict_out(x)
    assert_moves(expected["pair"][0], _dict_out(x + 1)["pair"][0])
    assert_same_structure(traced(x), expected)


def test_dict_output_of_module_with_strict_raises_runtime_error():
    torch.manual_seed(0)

    class M(nn.Module):
        def forward(self, x):
            return {"y": x + 1}

    with pytest.raises(RuntimeError, match="strict=False"):
        tracejit.trace(M(), torch.randn(3))


def _list_out(x):
    return [x * 3, (x.cos(), [x.sum()])]


def test_list_output_warns_tracer_warning():
    torch.manual_seed(0)
    with pytest.warns(tracejit.TracerWarning, match="list"):
        traced = tracejit.trace(_list_out, torch.randn(3))
    x = torch.randn(6)
    assert_moves(_list_out(x)[0], _list_out(x + 1)[0])
    assert_same_structure(traced(x), _list_out(x))


def test_list_output_with_strict_false_does_not_warn():
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracejit.TracerWarning)
        traced = tracejit.trace(_list_out, torch.randn(3), strict=False)
    x = torch.randn(6)
    assert_same_structure(traced(x), _list_out(x))


def test_list_output_warning_points_at_the_caller():
    torch.manual_seed(0)
    with pytest.warns(tracejit.TracerWarning, match="list") as record:
        tracejit.trace(_list_out, torch.randn(3))
    assert [w.filename for w in record if issubclass(w.category, tracejit.TracerWarning)] == [__file__]


def test_list_output_warning_of_module_points_at_the_caller():
    torch.manual_seed(0)

    class M(nn.Module):
        def forward(self, x):
            return [x + 1]

    with pytest.warns(tracejit.TracerWarning, match="list") as record:
        tracejit.trace(M(), torch.randn(3))
    assert [w.filename for w in record if issubclass(w.category, tracejit.TracerWarning)] == [__file__]


# ---------------------------------------------------------------------------------------------
# in-place ops and views: eager's aliasing on new inputs
# ---------------------------------------------------------------------------------------------

def _add_(x, y):
    x.add_(1)
    return x * 2 + y


def _setitem_scalar(x, y):
    x[0] = 5
    return x.sum() + y


def _view_mul_(x, y):
    v = x.view(-1)
    v.mul_(2)
    return v + 1 + y.sum()


def _transpose_slice_(x, y):
    x.t()[1:].sub_(y.mean())          # writes through a transposed slice view
    return x.relu()


def _iadd_returns_input(x, y):
    x += y.sum()
    return x


def _setitem_tensor_and_mask(x, y):
    x[:, 1] = y[:, 0]
    x[x > 0.5] = 0.0
    return x.clone()


def _unsqueeze_view_chain(x, y):
    a = x.unsqueeze(0)[0, :, :2]
    a.mul_(y.abs().sum() + 1)
    b = x[..., -1]
    b.copy_(b.exp())
    return a


def _intermediate_views(x, y):
    h = x * 3
    v = h[1:]
    v.add_(1)
    h[0] = h[0] + 7
    w = h.view(-1)
    w.div_(2)
    return h, v


MUTATORS = [_add_, _setitem_scalar, _view_mul_, _transpose_slice_, _iadd_returns_input,
            _setitem_tensor_and_mask, _unsqueeze_view_chain, _intermediate_views]


def _storage(t):
    return t.untyped_storage().data_ptr()


def _leaves(out):
    return [out] if isinstance(out, torch.Tensor) else [t for o in out for t in _leaves(o)]


GRAD_MODES = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}


@pytest.mark.parametrize("mode", list(GRAD_MODES))
@pytest.mark.parametrize("fn", MUTATORS, ids=lambda f: f.__name__.strip("_"))
def test_inplace_replays_with_eager_aliasing(fn, mode):
    torch.manual_seed(0)
    traced = tracejit.trace(fn, (torch.randn(3, 4), torch.randn(3, 4)))
    with GRAD_MODES[mode]():
        x, y = torch.randn(6, 5), torch.randn(6, 5)   # other sizes than the example
        x_eager, x_traced = x.clone(), x.clone()
        out_eager = fn(x_eager, y)
        out_traced = traced(x_traced, y)
    for a, b in zip(_leaves(out_traced), _leaves(out_eager)):
        assert_same(a, b)
    assert_moves(out_eager if isinstance(out_eager, torch.Tensor) else out_eager[0],
                 _leaves(fn(x.clone() * 3 + 1, y))[0])
    # the caller's tensor was changed (or not) exactly as eager changed it
    assert_same(x_traced, x_eager)
    # outputs alias the input exactly when eager's do, and are the input object when eager's is
    for a, b in zip(_leaves(out_traced), _leaves(out_eager)):
        assert (_storage(a) == _storage(x_traced)) == (_storage(b) == _storage(x_eager))
        assert (a is x_traced) == (b is x_eager)


def test_inputs_mutation_is_actually_observed():
    """Guard for the test above: these functions really mutate their input in eager."""
    torch.manual_seed(0)
    for fn in MUTATORS[:-1]:
        x = torch.randn(6, 5)
        before = x.clone()
        fn(x, torch.randn(6, 5))
        assert not torch.equal(x, before), fn.__name__


@settings(max_examples=10, deadline=None)
@given(rows=st.integers(2, 9), cols=st.integers(2, 9), seed=st.integers(0, 2**16))
def test_inplace_view_chain_new_shapes(rows, cols, seed):
    traced = _traced_view_chain()
    torch.manual_seed(seed)
    x, y = torch.randn(rows, cols), torch.randn(rows, cols)
    xe, xt = x.clone(), x.clone()
    out_e = _unsqueeze_view_chain(xe, y)
    out_t = traced(xt, y)
    assert not torch.equal(xe, x)
    assert_same(out_t, out_e)
    assert_same(xt, xe)
    assert _storage(out_t) == _storage(xt)


_TRACED = {}


def _traced_view_chain():
    if "chain" not in _TRACED:
        g = torch.Generator().manual_seed(0)
        _TRACED["chain"] = tracejit.trace(_unsqueeze_view_chain, (torch.randn(3, 4, generator=g),
                                                                  torch.randn(3, 4, generator=g)))
    return _TRACED["chain"]


def _chain(x, w):
    h = x @ w                     # fresh intermediates, each used once: candidates for in-place reuse
    a = (h * 2).sin()
    b = torch.cat([h, a], 0)      # h is still needed here, after a was computed from it
    c = (b.mean(0) * 0.5).exp()
    d = x.sigmoid() - 0.5         # x is an input: must not be written to
    return c * 0.5 - 1, d * 3, torch.relu(h - 0.1)


@pytest.mark.parametrize("mode", list(GRAD_MODES))
def test_no_input_or_intermediate_clobbered_in_any_grad_mode(mode):
    torch.manual_seed(0)
    traced = tracejit.trace(_chain, (torch.randn(3, 4), torch.randn(4, 4)))
    with GRAD_MODES[mode]():
        x, w = torch.randn(7, 4), torch.randn(4, 4)
        x0, w0 = x.clone(), w.clone()
        expected = _chain(x, w)
        for e, moved in zip(expected, _chain(x * 2, w * 2)):
            assert_moves(e, moved)
        out = traced(x, w)
        assert torch.equal(x, x0) and torch.equal(w, w0)
        for a, e in zip(out, expected):
            assert_same(a, e)
        # the outputs are distinct tensors, as in eager
        assert len({_storage(t) for t in out}) == 3


class BufferMutation(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("total", torch.zeros(4))
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.count.add_(1)
        self.total.add_(x.sum(0))
        return self.lin(x) + self.total / self.count


def test_buffer_mutation_in_module():
    torch.manual_seed(0)
    m = BufferMutation()
    ref = copy.deepcopy(m)
    traced = tracejit.trace(m, torch.randn(2, 4), check_trace=False)
    m.load_state_dict(ref.state_dict())
    for n in (3, 7):
        x = torch.randn(n, 4)
        assert_same(traced(x), ref(x))
        assert_same(m.count, ref.count)
        assert_same(m.total, ref.total)
    assert int(ref.count) == 2


def _uses_inplace(x):
    h = x * 2
    h.add_(1)
    h.mul_(x)
    h += 0.5
    h.sigmoid_()
    return h - x


def test_force_outplace_records_out_of_place_ops():
    torch.manual_seed(0)
    plain = tracejit.trace(_uses_inplace, torch.randn(3))
    assert re.search(r"aten::add_\.", str(plain.graph))       # recorded as in-place by default
    traced = tracejit.trace(_uses_inplace, torch.randn(3), _force_outplace=True)
    text = str(traced.graph)
    for name in ("add_", "mul_", "sigmoid_"):
        assert f"aten::{name}." not in text, text
    assert "aten::add." in text and "aten::mul." in text and "aten::sigmoid." in text
    x = torch.randn(9)
    assert_moves(_uses_inplace(x), _uses_inplace(x + 1))
    assert_same(traced(x), _uses_inplace(x))
    assert_same(plain(x), _uses_inplace(x))


def test_force_outplace_on_module():
    torch.manual_seed(0)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            h = self.lin(x)
            h.relu_()
            h.mul_(2)
            return h

    m = M()
    traced = tracejit.trace(m, torch.randn(2, 3), _force_outplace=True)
    text = str(traced.inlined_graph)
    assert "aten::relu_." not in text and "aten::mul_." not in text, text
    x = torch.randn(5, 3)
    assert_moves(m(x), m(-x))
    assert_same(traced(x), m(x))


# ---------------------------------------------------------------------------------------------
# autograd
# ---------------------------------------------------------------------------------------------

class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.b.weight = self.a.weight
        self.norm = nn.LayerNorm(4)
        self.head = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))

    def forward(self, x):
        return self.head(self.norm(self.b(torch.tanh(self.a(x))) + x))


def _grads(model, fn, x):
    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    loss = (fn(x) ** 2).sum() + fn(x * 0.5).mean()
    loss.backward()
    return loss.detach(), x.grad, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("batch", [1, 5, 11])
def test_gradients_match_eager(batch):
    torch.manual_seed(0)
    m = Shared().train()
    traced = tracejit.trace(m, torch.randn(3, 4))
    assert traced.training
    x = torch.randn(batch, 4)
    loss_e, gx_e, gp_e = _grads(m, m, x)
    loss_t, gx_t, gp_t = _grads(m, traced, x)
    assert gx_e.abs().max() > 1e-3
    assert_same(loss_t, loss_e)
    assert_same(gx_t, gx_e)
    assert gp_t.keys() == gp_e.keys()
    for name in gp_e:
        assert_same(gp_t[name], gp_e[name])
    # the traced module's parameters are the original's: their .grad is what was filled
    assert traced.a.weight.grad is m.a.weight.grad


def test_second_order_gradients_match_eager():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Softplus(), nn.Linear(8, 1)).train()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(3)   # larger weights: the higher derivatives are of order 1, far above the tolerance
    traced = tracejit.trace(m, torch.randn(2, 4))

    def grads(fn, x):
        x = x.detach().clone().requires_grad_()
        y = fn(x).sum()
        g1, = torch.autograd.grad(y, x, create_graph=True)
        g2, = torch.autograd.grad((g1 ** 2).sum(), x, create_graph=True)
        w_grad, = torch.autograd.grad(g2.sum(), m[0].weight)
        return g1, g2, w_grad

    x = torch.randn(6, 4)
    expected = grads(m, x)
    for e in expected:
        assert e.abs().max() > 0.1             # the derivatives are not trivially (near) zero
    actual = grads(traced, x)
    for a, e in zip(actual, expected):
        assert_same(a, e)


def test_gradients_through_traced_function_with_nested_inputs():
    torch.manual_seed(0)

    def f(x, pair):
        a, b = pair
        return (x * a).sin().sum() + (b @ x.t()).tanh().mean()

    traced = tracejit.trace(f, (torch.randn(3, 2), (torch.randn(3, 2), torch.randn(5, 2))))
    x, a, b = (torch.randn(7, 2, requires_grad=True), torch.randn(7, 2, requires_grad=True),
               torch.randn(4, 2, requires_grad=True))
    ge = torch.autograd.grad(f(x, (a, b)), (x, a, b))
    gt = torch.autograd.grad(traced(x, (a, b)), (x, a, b))
    for a_, e in zip(gt, ge):
        assert e.abs().max() > 1e-3
        assert_same(a_, e)
