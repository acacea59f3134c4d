"""The op registry (tracejit/ops/): ATen facts come from torch's tags and schemas, and the passes,
the recorder and the private generators act on them (side by side with eager)."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import tracejit
from tracejit import ops
from tracejit.ir import Graph, Node
from tracejit.passes.cse import eliminate_common_subexpressions
from tracejit.passes.dce import eliminate_dead_code


def test_split_name_is_the_one_parser():
    assert ops.split_name("aten::add_.Tensor") == ("aten", "add_", "Tensor")
    assert ops.split_name("aten::relu") == ("aten", "relu", "")
    assert ops.split_name("relu") == ("", "relu", "")
    assert ops.split_name("aten::add_.Tensor").qualified == "aten::add_.Tensor"
    assert ops.base_name("tracejit::sym_math") == "sym_math"


@pytest.mark.parametrize("name", ["rand", "randn_like", "bernoulli_", "dropout", "feature_alpha_dropout_",
                                  "binomial", "_standard_gamma", "rrelu", "lstm", "multinomial"])
def test_random_ops_come_from_atens_tag(name):
    assert ops.is_random(name)
    assert not ops.is_mergeable(name)


@pytest.mark.parametrize("name", ["add", "relu", "conv2d", "matmul", "softmax", "layer_norm"])
def test_deterministic_ops_are_not_random(name):
    assert not ops.is_random(name)
    assert ops.is_mergeable(f"aten::{name}")


def test_unknown_ops_are_not_mergeable_default_deny():
    assert not ops.is_mergeable("aten::no_such_op_anywhere")
    assert not ops.is_mergeable("mylib::relu")
    assert ops.schema_of("aten::no_such_op_anywhere") is None


def test_uninitialized_memory_is_not_mergeable_though_not_random():
    assert not ops.is_random("empty_like")
    assert not ops.is_mergeable("aten::empty_like.default")


@pytest.mark.parametrize("args, kwargs, draws", [
    ((None, 0.5, True), {}, True), ((None, 0.5, False), {}, False), ((None, 0.5), {"training": False}, False),
    ((None, 0.5), {"train": True}, True), ((None,), {}, True)])
def test_dropout_draws_only_in_training(args, kwargs, draws):
    assert ops.draws_random("dropout", args, kwargs) is draws


def test_sdpa_draws_only_with_a_nonzero_dropout_p():
    q = torch.randn(1, 2, 4, 8)
    assert not ops.draws_random("scaled_dot_product_attention", (q, q, q))
    assert ops.draws_random("scaled_dot_product_attention", (q, q, q), {"dropout_p": 0.1})


def test_dropouts_pointwise_inplace_and_aliases():
    assert {n for n in ("dropout", "dropout_", "alpha_dropout", "native_dropout", "rrelu", "lstm")
            if ops.is_dropout(n)} == {"dropout", "dropout_", "alpha_dropout"}
    assert ops.is_pointwise("aten::relu.default") and not ops.is_pointwise("aten::matmul.default")
    assert ops.is_inplace("aten::relu_.default") and not ops.is_inplace("aten::relu.default")
    assert not ops.is_inplace("aten::add.out")
    assert ops.functional_of("aten::add_.Tensor") == "aten::add.Tensor"
    assert ops.functional_of("aten::__iand__.Tensor") == "aten::__iand__.Tensor"
    assert ops.may_alias("aten::view.default") and ops.may_alias("aten::contiguous.default")
    assert not ops.may_alias("aten::add.Tensor")
    assert ops.takes_generator("normal_") and not ops.takes_generator("relu")


def _graph(op, n=2):
    """``n`` calls of ``op`` on one input (types from a real trace), each result returned."""
    t = tracejit.trace(lambda x: x + 1, torch.randn(2, 3)).graph.inputs[0].type
    g = Graph()
    x = g.add_input(t)
    g.outputs = [g.add_node(Node(op, "method:" + ops.base_name(op), (x,)), [t]).outputs[0] for _ in range(n)]
    return g


@pytest.mark.parametrize("op, merged", [("aten::relu.default", True), ("aten::rand_like.default", False),
                                        ("aten::empty_like.default", False), ("aten::bernoulli.default", False)])
def test_cse_merges_only_mergeable_ops(op, merged):
    g = _graph(op)
    g.outputs = [g.add_node(Node("aten::add.Tensor", "op:+", tuple(g.outputs)), [g.inputs[0].type]).outputs[0]]
    out = eliminate_common_subexpressions(g)
    assert (len(out.nodes) == 2) is merged


def test_dce_drops_an_unused_random_op_as_torch_jit_trace_does():
    def f(x):
        torch.rand(3)   # unused: nothing depends on the draw
        return x + 1
    g = _graph("aten::rand_like.default", 1)
    g.outputs = [g.inputs[0]]
    assert eliminate_dead_code(g).nodes == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = torch.jit.trace(f, torch.ones(2), check_trace=False)
    assert "aten::rand" not in str(ref.graph)


@pytest.mark.parametrize("training", [True, False])
def test_recorder_marks_rrelu_random_only_in_training(training):
    class M(torch.nn.Module):
        def forward(self, x):
            return F.rrelu(x, training=self.training)
    m = M().train(training)
    x = torch.randn(64) - 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(m, x, check_trace=False)
    random = [e for e in traced.ledger if e.kind == "nondeterministic"]
    assert bool(random) is training
    if not training:   # deterministic: the trace reproduces eager on a new input
        y = torch.randn(64) - 0.5
        torch.testing.assert_close(traced(y), m(y))
    else:              # eager draws: two calls differ, as the trace's do
        assert not torch.equal(m(x), m(x))
