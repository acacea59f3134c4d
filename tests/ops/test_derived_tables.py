"""The op tables the passes used to write by hand are now registry predicates (issue 24 item 2).

Each replaced table is kept here, verbatim, as the reference: the registry's derived answer covers
every op it listed (behaviour does not shrink), and where the derivation reaches further, the extra
ops are shown to be right for the pass that reads the fact (side by side with eager).
"""
import warnings

import pytest
import torch

import tracejit
from tracejit import ops
from tracejit.codegen.inplace import inplace_candidates

# codegen/inplace.py before the registry: UNARY, SCALAR_BINARY, FRESH
OLD_UNARY = {"abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "exp", "expm1", "floor", "frac", "log", "log10",
             "log1p", "log2", "neg", "reciprocal", "relu", "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt",
             "square", "tan", "tanh", "trunc", "erf", "erfc", "exp2", "sgn"}
OLD_SCALAR_BINARY = {"add", "sub", "mul", "div", "pow", "remainder", "fmod", "clamp", "clamp_min", "clamp_max"}
OLD_FRESH = OLD_UNARY | OLD_SCALAR_BINARY | {
    "linear", "conv1d", "conv2d", "conv3d", "matmul", "mm", "bmm", "addmm", "baddbmm", "softmax", "log_softmax",
    "layer_norm", "group_norm", "gelu", "silu", "mish", "hardtanh", "leaky_relu", "elu", "softplus", "cat", "stack",
    "clone", "sum", "mean", "where", "maximum", "minimum", "atan2", "hypot", "lerp", "addcmul", "addcdiv"}
# trace/recorder.py's _PIECES
OLD_PIECES = {"split", "unbind", "tensor_split", "unsafe_split", "hsplit", "vsplit", "dsplit"}


def test_inplace_twins_cover_the_old_unary_and_scalar_tables():
    for name in OLD_UNARY | OLD_SCALAR_BINARY:
        assert ops.inplace_twin(name) == name + "_", name
        assert ops.inplace_twin(f"aten::{name}") == name + "_", name


@pytest.mark.parametrize("name", ["rand", "bernoulli", "dropout", "view", "positive", "cat", "relu_", "conv2d",
                                  "no_such_op", "mylib::sin"])
def test_no_inplace_twin_for_random_aliasing_twinless_or_unknown_ops(name):
    """Default-deny: a random op (bernoulli_ means another thing), a view, an op without ``op_`` in ATen,
    an in-place op itself, an unknown op."""
    assert ops.inplace_twin(name) is None


def test_fresh_covers_the_old_table_and_denies_aliases():
    assert [n for n in OLD_FRESH if not ops.is_fresh(n)] == []
    # views, ops returning their input (dropout in eval, contiguous, to), in-place ops, storage sharers, unknown
    for name in ["view", "reshape", "contiguous", "to", "dropout", "add_", "_unsafe_view", "positive", "detach",
                 "type_as", "no_such_op"]:
        assert not ops.is_fresh(name), name


def test_dropout_in_eval_returns_its_input_so_it_is_not_fresh():
    """Why the default-deny matters: an unannotated op may hand back its input."""
    x = torch.randn(3)
    assert torch.ops.aten.dropout(x, 0.5, False) is x
    assert not ops.is_fresh("aten::dropout.default")


def _extra_ops(a):
    y = (a * 3).lgamma()          # lgamma: pointwise with lgamma_, not in the old UNARY
    z = (a * 2).logit(1e-3)       # logit(eps): a pointwise op with a number, not in the old SCALAR_BINARY
    w = torch.mm(a, a.t()).sinc()   # mm's result: fresh by the reviewed override
    return y, z, w


def test_derived_extras_run_in_place_and_match_eager_on_new_inputs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(_extra_ops, torch.rand(3, 3))
        reference = torch.jit.trace(_extra_ops, torch.rand(3, 3))
    assert sorted(inplace_candidates(traced.graph).values()) == ["lgamma_", "logit_", "sinc_"]
    for shape in [(3, 3), (5, 5)]:
        a = torch.rand(shape) * 0.3 + 0.01
        assert not torch.equal(_extra_ops(a)[0], _extra_ops(a + 0.1)[0])   # the input moves eager's output
        with torch.no_grad():
            got = traced(a)
        for g, e in zip(got, _extra_ops(a)):
            torch.testing.assert_close(g, e)
        if shape == (3, 3):
            for g, r in zip(got, reference(a)):
                torch.testing.assert_close(g, r)


def test_a_number_argument_of_another_op_keeps_it_out_of_place():
    """A pointwise op whose second operand is a tensor (lerp's end) is not rewritten: only numbers may follow."""
    def f(a, b):
        return (a * 2).lerp(b, 0.5)
    traced = tracejit.trace(f, (torch.rand(4), torch.rand(4)))
    assert ops.inplace_twin("lerp") == "lerp_" and inplace_candidates(traced.graph) == {}
    a, b = torch.rand(5), torch.rand(5)
    with torch.no_grad():
        torch.testing.assert_close(traced(a, b), f(a, b))


def test_pieces_cover_the_old_table():
    assert [n for n in OLD_PIECES if not ops.splits_into_views(n)] == []
    for name in ["chunk", "split_with_sizes", "aten::split.Tensor"]:
        assert ops.splits_into_views(name), name
    for name in ["cat", "view", "meshgrid", "broadcast_tensors", "where", "no_such_op"]:
        assert not ops.splits_into_views(name), name


def _chunks(x):
    return torch.stack(x.chunk(x.size(1))[:2]).sum(0)


def test_a_chunk_by_a_traced_size_is_in_the_ledger():
    """chunk (derived, not in the old list) splits into a number of pieces that follows a traced size, as
    split does: the trace fixes that number and its ledger says so (it said nothing before)."""
    x = torch.randn(6, 3)
    assert len(x.chunk(x.size(1))) != len(torch.randn(6, 6).chunk(6))   # the size moves the count in eager
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(_chunks, x)
    entries = [e for e in traced.ledger if e.kind == "size" and "'chunk' split a tensor into 3 pieces" in e.message]
    assert len(entries) == 1 and entries[0].value == 3
    y = torch.randn(6, 3)
    torch.testing.assert_close(traced(y), _chunks(y))
