"""Passes: dead code elimination (tracejit.passes.dce) and inlining of submodule calls (tracejit.passes.inline)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import tracejit
from tracejit.codegen.python import compile_function, generate
from tracejit.ir import Node, verify
from tracejit.passes.dce import eliminate_dead_code
from tracejit.passes.inline import inline_calls

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _ops(graph):
    return [n.op.split(".")[0] for n in graph.nodes]


def _run(graph, self_obj, *args):
    src, globs = generate(graph, "forward")
    fn = compile_function(src, "forward", globs, "test_passes")
    return fn(self_obj, *args)


# --------------------------------------------------------------------------------------------------
# dead code elimination, through tracing


def dead_mul(x):
    y = x * 2  # noqa: F841  (dead)
    z = x + 1
    return z


def dead_chain(x):
    a = x.sin()
    b = a.cos().exp()  # noqa: F841
    c = torch.stack([a, x]).sum()  # noqa: F841
    return x.relu()


def test_unused_pure_nodes_are_removed():
    traced = tracejit.trace(dead_mul, torch.randn(3))
    assert _ops(traced.graph) == ["aten::add"]
    assert "mul" not in traced.code
    x = torch.randn(5)
    torch.testing.assert_close(traced(x), dead_mul(x))
    assert not torch.allclose(traced(x), traced(x + 1))


def test_unused_chains_are_removed():
    traced = tracejit.trace(dead_chain, torch.randn(4))
    assert _ops(traced.graph) == ["aten::relu"]
    x = torch.randn(6)
    torch.testing.assert_close(traced(x), dead_chain(x))


def bump(x, buf):
    buf.add_(1)
    return x * 2


def test_in_place_op_on_an_input_is_kept_though_its_result_is_unused():
    traced = tracejit.trace(bump, (torch.randn(3), torch.zeros(3)))
    assert "aten::add_" in _ops(traced.graph)
    assert any(n.effectful for n in traced.graph.nodes if n.op.startswith("aten::add_"))
    x, buf = torch.randn(4), torch.zeros(4)
    torch.testing.assert_close(traced(x, buf), x * 2)
    torch.testing.assert_close(buf, torch.ones(4))
    traced(x, buf)
    torch.testing.assert_close(buf, torch.full((4,), 2.0))


def store(x, buf):
    t = x * 3
    buf.copy_(t)
    buf[0] = x.sum()
    scratch = x.clone()
    scratch.mul_(2)  # mutates a value nothing reads
    return x + 1


def test_nodes_feeding_effectful_nodes_are_kept():
    traced = tracejit.trace(store, (torch.randn(3), torch.zeros(3)))
    ops = _ops(traced.graph)
    for op in ("aten::mul", "aten::copy_", "aten::sum", "aten::add"):
        assert op in ops, ops
    x, buf = torch.randn(5), torch.zeros(5)
    out = traced(x, buf)
    expected_buf = torch.zeros(5)
    expected = store(x, expected_buf)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(buf, expected_buf)
    assert not torch.allclose(buf, torch.zeros(5))


# --------------------------------------------------------------------------------------------------
# dead code elimination, on graphs edited by hand


def test_dce_pass_removes_injected_dead_nodes_and_keeps_effectful_ones():
    traced = tracejit.trace(bump, (torch.randn(3), torch.zeros(3)))
    g = traced.graph
    x, buf = g.inputs
    t = x.type
    # dead pure chain: x * x -> neg
    m = g.add_node(Node("aten::mul.Tensor", "method:mul", (x, x)), [t])
    g.add_node(Node("aten::neg.default", "method:neg", (m.outputs[0],)), [t])
    # effectful node whose result nothing reads, fed by a pure node
    s = g.add_node(Node("aten::sub.Tensor", "method:sub", (x, x)), [t])
    g.add_node(Node("aten::mul_.Scalar", "method:mul_", (buf, 3), effectful=True), [t])
    g.add_node(Node("aten::add_.Tensor", "method:add_", (buf, s.outputs[0]), effectful=True), [t])
    before = len(g.nodes)
    result = eliminate_dead_code(g)
    assert result is g
    ops = _ops(g)
    assert "aten::neg" not in ops and "aten::sub" in ops
    assert ops.count("aten::mul") == 1  # the traced x * 2 stays, the injected x * x goes
    assert "aten::mul_" in ops and ops.count("aten::add_") == 2
    assert len(g.nodes) == before - 2
    verify(g)
    # idempotent
    eliminate_dead_code(g)
    assert _ops(g) == ops
    # and the result still runs: buf = (buf + 1) * 3 + 0
    xv, bv = torch.randn(4), torch.ones(4)
    torch.testing.assert_close(_run(g, None, xv, bv), xv * 2)
    torch.testing.assert_close(bv, torch.full((4,), 6.0))


def write_out(x, buf):
    torch.add(x, 1, out=buf)
    return x * 2


def test_out_variant_writes_are_kept():
    traced = tracejit.trace(write_out, (torch.randn(3), torch.zeros(3)))
    x, buf = torch.randn(3), torch.zeros(3)
    traced(x, buf)
    torch.testing.assert_close(buf, x + 1)


# --------------------------------------------------------------------------------------------------
# inlining


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 4))
        self.offset = torch.randn(4)  # plain attribute: a constant of this submodule's graph

    def forward(self, x, extra=None):
        h = self.norm(self.lin(x)) * self.scale + self.offset
        if extra is not None:
            h = h + extra
        return h, h.sum(-1)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([_Block(), _Block()])
        self.head = nn.Sequential(nn.Linear(4, 3), nn.Tanh())
        self.bias = torch.randn(4)

    def forward(self, x, y):
        h, s = self.blocks[0](x)
        h2, s2 = self.blocks[1](h, y)
        h3, _ = self.blocks[0](h2 + self.bias, x.sum(0))  # second, different call: forward_1
        return self.head(h3) * s.unsqueeze(-1) + s2.unsqueeze(-1)


class _Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, n):
        return self.lin(x).view(n, -1) * self.ctx, x.size(0)


class _Captures(nn.Module):
    """A submodule reading a parent's value through an attribute (a capture) and taking a size."""

    def __init__(self):
        super().__init__()
        self.inner = _Inner()

    def forward(self, x):
        self.inner.ctx = x.mean()
        y, m = self.inner(x, x.size(0))
        return y.sum(1) * m


def _models():
    torch.manual_seed(0)
    return {
        "nested": (_Net().eval(), (torch.randn(3, 4), torch.randn(3, 4)), (torch.randn(5, 4), torch.randn(5, 4))),
        "mlp": (nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), (torch.randn(3, 4),),
                (torch.randn(6, 4),)),
        "captures": (_Captures(), (torch.randn(3, 4),), (torch.randn(5, 4),)),
        "encoder": (nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval(),
                    (torch.randn(2, 3, 8),), (torch.randn(3, 5, 8),)),
        "conv_bn": (nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval(),
                    (torch.randn(1, 3, 6, 6),), (torch.randn(2, 3, 7, 7),)),
    }


@pytest.mark.parametrize("name", list(_models()))
def test_inlined_graph_verifies_and_runs_like_the_module(name):
    model, example, new = _models()[name]
    traced = tracejit.trace(model, example)
    graph = traced.graph
    n_nodes = len(graph.nodes)
    flat = inline_calls(graph)
    verify(flat)
    assert not any(n.op == "tracejit::call_module" for n in flat.nodes)
    assert any(n.op == "tracejit::call_module" for n in graph.nodes)
    assert len(graph.nodes) == n_nodes  # the input graph is left alone
    # every get_attr path is a full path from the root
    for n in flat.nodes:
        if n.op == "tracejit::get_attr":
            path = n.attrs["path"]
            owner, _, leaf = path.rpartition(".")
            sub = traced.get_submodule(owner)
            assert leaf in sub._parameters or leaf in sub._buffers, path
    got = _run(flat, traced, *new)
    want = model(*new)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got, traced(*new))
    moved = tuple(a.flip(0) for a in new)
    assert not torch.allclose(_run(flat, traced, *moved), got)


def test_inline_records_scopes_and_moves_submodule_constants():
    model = _Net().eval()
    traced = tracejit.trace(model, (torch.randn(3, 4), torch.randn(3, 4)))
    flat = inline_calls(traced.graph)
    scopes = {n.scope for n in flat.nodes if n.op.startswith("aten::linear")}
    assert scopes == {"blocks.0.lin", "blocks.1.lin", "head.0"}
    assert {n.attrs["path"] for n in flat.nodes if n.op == "tracejit::get_attr"} >= {
        "blocks.0.lin.weight", "blocks.1.scale", "head.0.bias"}
    consts = [n for n in flat.nodes if n.op == "tracejit::constant"]
    assert len(consts) == len(flat.constants) >= 3  # root bias + each call's offset
    assert sorted(n.attrs["index"] for n in consts) == list(range(len(flat.constants)))
    assert any(c is model.bias or torch.equal(c, model.bias) for c in flat.constants)
    assert any(torch.equal(c, model.blocks[1].offset) for c in flat.constants)


def test_inline_with_a_prefix_prefixes_paths_and_runs_on_the_parent():
    outer = nn.Sequential()
    outer.add_module("net", nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    traced = tracejit.trace(outer, torch.randn(2, 4))
    sub_graph = traced.net.graph
    flat = inline_calls(sub_graph, prefix="net.")
    verify(flat)
    assert {n.attrs["path"] for n in flat.nodes if n.op == "tracejit::get_attr"} == {"net.0.weight", "net.0.bias"}
    x = torch.randn(5, 4)
    torch.testing.assert_close(_run(flat, traced, x), outer(x))


def test_inline_of_a_function_graph_is_an_equivalent_copy():
    def f(x, y):
        return (x * y).sum(-1), x[0]

    traced = tracejit.trace(f, (torch.randn(2, 3), torch.randn(2, 3)))
    flat = inline_calls(traced.graph)
    verify(flat)
    assert [n.op for n in flat.nodes] == [n.op for n in traced.graph.nodes]
    assert all(a is not b for a, b in zip(flat.nodes, traced.graph.nodes))
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    for got, want in zip(_run(flat, None, x, y), f(x, y)):
        torch.testing.assert_close(got, want)
