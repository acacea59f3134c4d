"""trace(fn, inputs) for plain functions: a tensor, a tuple of arguments, nested containers of
tensors (kept as the same container types), namedtuples, and keyword inputs.

Every check runs the traced program on NEW inputs (other values and other sizes than the
example) and compares it with eager; each test first makes sure the inputs move the output.
"""
import collections
import io

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tracejit

Pair = collections.namedtuple("Pair", "a b")


def assert_moves(out1, out2, margin=1e-2):
    """The outputs for two different inputs differ by far more than the comparison tolerance."""
    assert out1.shape != out2.shape or (out1 - out2).abs().max().item() > margin


def assert_same(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# a tensor / a tuple of tensors
# ---------------------------------------------------------------------------------------------

def _one(x):
    # strictly increasing in every element of x (slope >= 0.5), so x + 1 always moves the output
    return torch.tanh(x * 3.0) - 0.5 * x.sum() / x.numel() + x.cumsum(0)


def test_single_tensor_example_returns_traced_function(device):
    torch.manual_seed(0)
    traced = tracejit.trace(_one, torch.randn(4, device=device))
    assert isinstance(traced, tracejit.TracedFunction)
    x1, x2 = torch.randn(9, device=device), torch.randn(9, device=device)
    assert_moves(_one(x1), _one(x2))
    assert_same(traced(x1), _one(x1))
    assert_same(traced(x2), _one(x2))


_ONE_TRACED = {}


def _traced_one():
    if "f" not in _ONE_TRACED:
        torch.manual_seed(0)
        _ONE_TRACED["f"] = tracejit.trace(_one, torch.randn(5))
    return _ONE_TRACED["f"]


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_single_tensor_new_lengths(n, seed):
    torch.manual_seed(seed)
    traced = _traced_one()
    x = torch.randn(n) * 3
    assert_moves(_one(x), _one(x + 1.0))
    assert_same(traced(x), _one(x))


def _two(x, y):
    return x @ y.t() + 2 * x.sum(1, keepdim=True) - y.mean()


def test_tuple_of_inputs(device):
    torch.manual_seed(0)
    traced = tracejit.trace(_two, (torch.randn(3, 4, device=device), torch.randn(2, 4, device=device)))
    a, b = torch.randn(6, 5, device=device), torch.randn(7, 5, device=device)
    a2 = torch.randn(6, 5, device=device)
    assert_moves(_two(a, b), _two(a2, b))
    out = traced(a, b)
    assert out.shape == (6, 7) and out.device == a.device
    assert_same(out, _two(a, b))
    assert_same(traced(a2, b), _two(a2, b))


def test_tuple_example_inputs_are_spread_as_arguments():
    """A tuple of example inputs means several arguments; a 1-tuple means one argument."""
    torch.manual_seed(0)
    seen = []

    def f(x):
        seen.append(type(x))
        return x * 2 + 1

    traced = tracejit.trace(f, (torch.randn(3),), allow_frozen_python_state=True)   # `seen`: a spy
    assert seen and all(t is torch.Tensor for t in seen)
    x = torch.randn(8)
    assert_moves(f(x), f(x * 2))
    assert_same(traced(x), f(x))


# ---------------------------------------------------------------------------------------------
# nested containers as inputs
# ---------------------------------------------------------------------------------------------

def _nested(x, pair, seq, point):
    # the body checks the container types it is given, while tracing and in eager
    assert isinstance(pair, tuple) and not hasattr(pair, "_fields"), type(pair)
    assert isinstance(pair[1], tuple), type(pair[1])
    assert isinstance(seq, list), type(seq)
    assert isinstance(point, Pair), type(point)
    a, (b, c) = pair
    return (x * a + b.sin() * c - seq[0] * seq[1].exp() + point.a * point.b.cos()).relu() + seq[2].sum()


def _nested_args(n, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda: torch.randn(n, generator=g)  # noqa: E731
    return (r(), (r(), (r(), r())), [r(), r(), r()], Pair(r(), r()))


def test_nested_tuple_list_namedtuple_inputs_keep_their_types():
    torch.manual_seed(0)
    seen = []

    def f(x, pair, seq, point):
        seen.append((type(pair), type(pair[1]), type(seq), type(point)))
        return _nested(x, pair, seq, point)

    traced = tracejit.trace(f, _nested_args(4, 1), allow_frozen_python_state=True)   # `seen`: a spy
    assert seen, "the function was not run while tracing"
    assert seen[0] == (tuple, tuple, list, Pair)

    new1, new2 = _nested_args(11, 2), _nested_args(11, 3)
    assert_moves(_nested(*new1), _nested(*new2))
    assert_same(traced(*new1), _nested(*new1))
    assert_same(traced(*new2), _nested(*new2))


def test_namedtuple_example_is_one_argument():
    torch.manual_seed(0)
    seen = []

    def f(p):
        seen.append(type(p))
        return p.a * 2 - p.b.tanh()

    traced = tracejit.trace(f, Pair(torch.randn(3), torch.randn(3)), allow_frozen_python_state=True)   # spy
    assert seen and seen[0] is Pair
    p1 = Pair(torch.randn(7), torch.randn(7))
    p2 = Pair(torch.randn(7), torch.randn(7))
    assert_moves(f(p1), f(p2))
    assert_same(traced(p1), f(p1))
    assert_same(traced(p2), f(p2))


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 16), seed=st.integers(0, 2**16))
def test_nested_inputs_new_sizes(n, seed):
    torch.manual_seed(seed)
    traced = _traced_nested()
    args = _nested_args(n, seed)
    x, pair, seq, point = args
    out = _nested(*args)
    assert_moves(out, _nested(x, pair, [seq[0], seq[1], seq[2] + 1], point))  # shifts the output by n
    assert_same(traced(*args), out)


_NESTED_TRACED = {}


def _traced_nested():
    if "f" not in _NESTED_TRACED:
        _NESTED_TRACED["f"] = tracejit.trace(_nested, _nested_args(5, 0))
    return _NESTED_TRACED["f"]


def _with_dict(x, d):
    assert isinstance(d, dict), type(d)
    return x * d["scale"] + d["shift"].exp()


def test_dict_input_keeps_its_type():
    torch.manual_seed(0)
    seen = []

    def f(x, d):
        seen.append(type(d))
        return _with_dict(x, d)

    traced = tracejit.trace(f, (torch.randn(3), {"scale": torch.randn(3), "shift": torch.randn(3)}),
                            allow_frozen_python_state=True)   # `seen`: a spy
    assert issubclass(seen[0], dict)   # a dict that notes key-set reads while tracing (trace/input_keys.py)
    x = torch.randn(6)
    d1 = {"scale": torch.randn(6), "shift": torch.randn(6)}
    d2 = {"scale": torch.randn(6), "shift": torch.randn(6)}
    assert_moves(_with_dict(x, d1), _with_dict(x, d2))
    assert_same(traced(x, d1), _with_dict(x, d1))
    assert_same(traced(x, d2), _with_dict(x, d2))


def test_dict_nested_in_tuple_input():
    torch.manual_seed(0)

    def f(pack):
        x, d = pack
        return _with_dict(x, d)

    traced = tracejit.trace(f, ((torch.randn(3), {"scale": torch.randn(3), "shift": torch.randn(3)}),))
    x = torch.randn(5)
    d = {"scale": torch.randn(5), "shift": torch.randn(5)}
    assert_moves(_with_dict(x, d), _with_dict(x + 1, d))
    assert_same(traced((x, d)), _with_dict(x, d))


def test_nested_structure_mismatch_is_rejected():
    """The traced callable takes the traced structure: other nesting is a TypeError, not a wrong result."""
    torch.manual_seed(0)
    traced = tracejit.trace(_nested, _nested_args(4, 1))
    x, pair, seq, point = _nested_args(4, 2)
    with pytest.raises(TypeError, match="seq"):
        traced(x, pair, seq[:2], point)
    with pytest.raises(TypeError, match="pair"):
        traced(x, [pair[0], pair[1]], seq, point)


def _two_roles(a, b):
    return a * 2 + b.exp()


def test_same_tensor_object_for_two_arguments():
    torch.manual_seed(0)
    x = torch.randn(3)
    traced = tracejit.trace(_two_roles, (x, x), check_trace=False)
    a, b = torch.randn(6), torch.randn(6)
    assert_moves(_two_roles(a, b), _two_roles(b, a))
    assert_same(traced(a, b), _two_roles(a, b))


# ---------------------------------------------------------------------------------------------
# keyword inputs
# ---------------------------------------------------------------------------------------------

def _kw(x, y, scale=None):
    return x * y.sigmoid() + scale


def test_example_kwarg_inputs_traced_as_keywords():
    torch.manual_seed(0)
    traced = tracejit.trace(_kw, example_kwarg_inputs={"x": torch.randn(3), "y": torch.randn(3),
                                                       "scale": torch.randn(3)})
    kw1 = {"x": torch.randn(8), "y": torch.randn(8), "scale": torch.randn(8)}
    kw2 = {"x": torch.randn(8), "y": torch.randn(8), "scale": torch.randn(8)}
    assert_moves(_kw(**kw1), _kw(**kw2))
    assert_same(traced(**kw1), _kw(**kw1))
    # keyword order does not matter
    assert_same(traced(scale=kw2["scale"], y=kw2["y"], x=kw2["x"]), _kw(**kw2))


def test_example_inputs_mixed_with_kwarg_inputs():
    torch.manual_seed(0)
    traced = tracejit.trace(_kw, (torch.randn(3), torch.randn(3)), example_kwarg_inputs={"scale": torch.randn(3)})
    x, y, s = torch.randn(5), torch.randn(5), torch.randn(5)
    assert_moves(_kw(x, y, scale=s), _kw(x, y, scale=s * 3))
    assert_same(traced(x, y, scale=s), _kw(x, y, scale=s))
    assert_same(traced(x, y, scale=s * 3), _kw(x, y, scale=s * 3))


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 12), m=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_kwarg_inputs_new_shapes(n, m, seed):
    torch.manual_seed(seed)
    traced = _traced_kw2d()
    kw = {"x": torch.randn(n, m), "y": torch.randn(n, m), "scale": torch.randn(m)}
    ref = _kw(**kw)
    assert_moves(ref, _kw(kw["x"] + 1, kw["y"], kw["scale"]))
    assert_same(traced(**kw), ref)


_KW_TRACED = {}


def _traced_kw2d():
    if "f" not in _KW_TRACED:
        g = torch.Generator().manual_seed(0)
        _KW_TRACED["f"] = tracejit.trace(_kw, example_kwarg_inputs={
            "x": torch.randn(2, 3, generator=g), "y": torch.randn(2, 3, generator=g),
            "scale": torch.randn(3, generator=g)})
    return _KW_TRACED["f"]


def _builtin_named(input, max):  # noqa: A002 - parameter names shadow builtins on purpose (like F.* APIs)
    return input.tanh() * max


def test_kwarg_inputs_named_like_builtins():
    torch.manual_seed(0)
    traced = tracejit.trace(_builtin_named, example_kwarg_inputs={"input": torch.randn(3), "max": torch.randn(3)})
    a, b = torch.randn(6), torch.randn(6)
    assert_moves(_builtin_named(a, b), _builtin_named(a * 2, b))
    assert_same(traced(input=a, max=b), _builtin_named(input=a, max=b))


# ---------------------------------------------------------------------------------------------
# a torch helper that dispatches a call of its own
# ---------------------------------------------------------------------------------------------
def test_einsum_with_its_operands_in_one_tuple_or_list():
    """``torch.einsum(eq, (a, b))`` (the old form, HF's Longformer) calls ``torch.einsum(eq, a, b)`` from Python:
    that call is traced through again, not taken for the C++ function the helper runs (which has another
    signature: the trace failed with "einsum() takes 2 positional arguments but 3 were given")."""
    def f(a, b):
        return torch.einsum("bi,bj->bij", (a, b)) + torch.einsum("bi,bj->bji", [a, b]).transpose(1, 2) * 2

    traced = tracejit.trace(f, (torch.randn(1, 3), torch.randn(1, 4)))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    new = (torch.randn(2, 5), torch.randn(2, 6))
    assert_moves(f(*new)[0], f(*new)[1])
    for program in (traced, loaded):
        assert_same(program(*new), f(*new))


def test_keyword_arguments_choose_the_overload_their_values_fit():
    """``torch.repeat_interleave(x, repeats=4, dim=-2)`` (HF's Canine) is ``self_int``: the keyword's value picks
    the overload, not only its name (it was ``self_Tensor`` with a number for the tensor, which save refused:
    "tracejit.load would refuse this program"); ``clamp(x, min=tensor)`` is ``clamp.Tensor``."""
    def f(x):
        return torch.repeat_interleave(x, repeats=4, dim=-2) * torch.clamp(x, min=x.mean()).sum()

    traced = tracejit.trace(f, (torch.randn(1, 3, 2),))
    ops = [n.op for n in traced.graph.nodes]
    assert "aten::repeat_interleave.self_int" in ops and "aten::clamp.Tensor" in ops, ops
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    new = torch.randn(2, 5, 3)
    for program in (traced, loaded):
        assert_same(program(new), f(new))
