"""tracejit.ir.verify: accepts every traced graph, rejects hand-broken ones."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tracejit
from tracejit.ir import Graph, Node, TensorType, VerificationError, verify

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")

T3 = TensorType(torch.float32, (3,), "cpu")


def _mlp():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(3, 4)


def _conv_bn():
    return (nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).eval(),
            torch.randn(2, 3, 6, 6))


def _attention():
    return (nn.MultiheadAttention(8, 2, batch_first=True).eval(),
            (torch.randn(2, 5, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8)))


def _sdpa_fn():
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
    return attend, tuple(torch.randn(1, 2, 3, 4) for _ in range(3))


def _lstm():
    return nn.LSTM(4, 6, num_layers=2, batch_first=True), torch.randn(2, 5, 4)


def _encoder():
    return nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval(), torch.randn(2, 3, 8)


def _indexing():
    def index(x, idx):
        return x[0, 1:], x[..., None, -1], x[idx], x[x > 0], x[:, : x.size(1) // 2]
    return index, (torch.randn(3, 4), torch.tensor([2, 0]))


def _in_place():
    def update(x, buf):
        y = x.clone()
        y.mul_(2)
        y[0] = 1.0
        y[:, 1] += x[:, 0]
        buf.add_(y.sum(0))
        return y
    return update, (torch.randn(3, 4), torch.zeros(4))


class _Nested(nn.Module):
    """A submodule called twice (two methods), tuple outputs, captured values and constants."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
        self.table = torch.randn(4)  # plain tensor attribute: captured as a constant

    def forward(self, x, y):
        a = self.inner(x)
        b = self.inner(torch.cat([y, y], 0))
        return a.sum(0) * self.table, b[: x.size(0)]


def _nested():
    return _Nested().eval(), (torch.randn(2, 4), torch.randn(3, 4))


CORPUS = {"mlp": _mlp, "conv_bn": _conv_bn, "attention": _attention, "sdpa_fn": _sdpa_fn, "lstm": _lstm,
          "encoder": _encoder, "indexing": _indexing, "in_place": _in_place, "nested": _nested}


def _graphs(traced):
    if isinstance(traced, nn.Module):
        for path, m in traced.named_modules():
            for name, fn in m._traced_methods.items():
                yield f"{path}:{name}", fn.graph
            if "forward" in m._traced_methods:
                assert m.graph is m._traced_methods["forward"].graph
    else:
        yield "fn", traced.graph


@pytest.mark.parametrize("name", list(CORPUS))
def test_verify_accepts_every_traced_graph(name):
    fn, example = CORPUS[name]()
    traced = tracejit.trace(fn, example)
    graphs = list(_graphs(traced))
    assert graphs
    for where, g in graphs:
        verify(g)
    if isinstance(traced, nn.Module):
        verify(traced.inlined_graph)
        called = {(n.attrs["path"], n.attrs["method"]) for n in traced.graph.nodes if n.op == "tracejit::call_module"}
        assert len(graphs) >= 1 + len(called)  # submodule graphs were checked too


def test_verify_accepts_trace_module_methods():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 1, 3)

        def forward(self, x):
            return self.conv(x)

        def weighted_kernel_sum(self, weight):
            return weight * self.conv.weight

    traced = tracejit.trace_module(Net(), {"forward": torch.rand(1, 1, 3, 3),
                                           "weighted_kernel_sum": torch.rand(1, 1, 3, 3)})
    verify(traced.weighted_kernel_sum.graph)
    verify(traced.graph)
    verify(traced.conv.graph)


# --------------------------------------------------------------------------------------------------
# hand-built graphs


def _chain():
    """x -> neg -> relu -> output: every node depends on the previous one."""
    g = Graph()
    x = g.add_input(T3, hint="x")
    a = g.add_node(Node("aten::neg.default", "method:neg", (x,)), [T3])
    b = g.add_node(Node("aten::relu.default", "method:relu", (a.outputs[0],)), [T3])
    g.outputs = [b.outputs[0]]
    return g, x, a, b


def test_verify_accepts_well_formed_hand_built_graph():
    g, *_ = _chain()
    verify(g)


def test_verify_rejects_use_before_definition_in_hand_built_graph():
    g, x, a, b = _chain()
    g.nodes = [b, a]
    with pytest.raises(VerificationError):
        verify(g)


def test_verify_rejects_a_node_output_listed_twice():
    g, x, a, b = _chain()
    a.outputs = [a.outputs[0], a.outputs[0]]
    with pytest.raises(VerificationError):
        verify(g)


def test_verify_rejects_a_value_defined_by_two_nodes():
    g, x, a, b = _chain()
    c = Node("aten::abs.default", "method:abs", (x,))
    c.outputs = [a.outputs[0]]
    g.nodes.insert(1, c)
    with pytest.raises(VerificationError):
        verify(g)


def test_verify_rejects_undefined_graph_output_and_foreign_values():
    g, x, a, b = _chain()
    g.nodes = [a]  # b removed, but its value is still the output
    with pytest.raises(VerificationError):
        verify(g)
    g2, x2, a2, b2 = _chain()
    other, ox, oa, ob = _chain()
    b2.args = (oa.outputs[0],)  # a value of another graph
    with pytest.raises(VerificationError):
        verify(g2)


def test_verify_rejects_input_with_a_producer():
    g, x, a, b = _chain()
    x.producer = a
    with pytest.raises(VerificationError):
        verify(g)


def test_verify_rejects_values_nested_in_containers_used_early():
    g = Graph()
    x = g.add_input(T3, hint="x")
    a = g.add_node(Node("aten::neg.default", "method:neg", (x,)), [T3])
    cat = g.add_node(Node("aten::cat.default", "fn:torch.cat", ([x, a.outputs[0]],), {"dim": 0}),
                     [TensorType(torch.float32, (6,), "cpu")])
    g.outputs = [cat.outputs[0]]
    verify(g)
    g.nodes = [cat, a]
    with pytest.raises(VerificationError):
        verify(g)
    g.nodes = [a, cat]
    cat.args = ()
    cat.kwargs = {"tensors": [x, Graph().add_input(T3)], "dim": 0}
    with pytest.raises(VerificationError):
        verify(g)


# --------------------------------------------------------------------------------------------------
# traced graphs, broken by hand


def _dependent_pair(graph):
    for i, node in enumerate(graph.nodes):
        outs = {id(v) for v in node.outputs if v is not None}
        for j in range(i + 1, len(graph.nodes)):
            if any(id(v) in outs for v in graph.nodes[j].input_values()):
                return i, j
    raise AssertionError("no dependent nodes")


@pytest.mark.parametrize("name", ["mlp", "encoder", "indexing", "in_place"])
def test_verify_rejects_traced_graph_with_swapped_dependent_nodes(name):
    fn, example = CORPUS[name]()
    traced = tracejit.trace(fn, example)
    for where, g in _graphs(traced):
        if len(g.nodes) < 2:
            continue
        i, j = _dependent_pair(g)
        original = list(g.nodes)
        g.nodes[i], g.nodes[j] = g.nodes[j], g.nodes[i]
        with pytest.raises(VerificationError):
            verify(g)
        g.nodes = original
        verify(g)


@pytest.mark.parametrize("name", ["mlp", "lstm", "indexing"])
def test_verify_rejects_traced_graph_with_duplicated_output(name):
    fn, example = CORPUS[name]()
    traced = tracejit.trace(fn, example)
    checked = 0
    for where, g in _graphs(traced):
        node = next((n for n in g.nodes if n.outputs and n.outputs[0] is not None), None)
        if node is None:
            continue
        node.outputs = node.outputs + [node.outputs[0]]
        with pytest.raises(VerificationError):
            verify(g)
        checked += 1
    assert checked
