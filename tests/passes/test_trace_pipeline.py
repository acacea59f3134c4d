"""TRACE_PIPELINE (passes/pipeline.py) is what finishes every recorded graph, once per graph, in order."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit
from tracejit.ir import GUARD
from tracejit.passes import pipeline

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        x.cos()                          # dead: only dead-code elimination removes it
        return self.fc(x).relu()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x) * 2

    def other(self, x):
        return self.block(x) - 1


def _recording(monkeypatch):
    """Wrap each pipeline entry so it logs (pass, graph's module type, graph name) when it runs."""
    ran = []

    def logged(name, fn):
        def run(graph):
            ran.append((name, graph.module_type, graph.name))
            return fn(graph)
        return run

    monkeypatch.setattr(pipeline, "TRACE_PIPELINE", tuple((n, logged(n, f)) for n, f in pipeline.TRACE_PIPELINE))
    return ran


def test_the_pipeline_runs_once_per_recorded_graph_in_order(monkeypatch):
    ran = _recording(monkeypatch)
    torch.manual_seed(0)
    net = Net().eval()
    traced = tracejit.trace_module(net, {"forward": torch.randn(2, 4), "other": torch.randn(2, 4)},
                                   check_trace=False)
    names = [n for n, _ in pipeline.TRACE_PIPELINE]
    assert names == ["add_training_guard", "eliminate_dead_code"]
    # the submodule graphs are shared by both methods and finished once; each root method once
    assert ran == [(n, graph, "forward") for graph in ("Linear", "Block", "Net") for n in names] + \
        [(n, "Net", "other") for n in names]
    x = torch.randn(5, 4)
    torch.testing.assert_close(traced(x), net(x))
    torch.testing.assert_close(traced.other(x), net.other(x))
    torch.testing.assert_close(traced(x), torch.jit.trace(net, torch.randn(2, 4))(x))


def test_what_the_pipeline_lists_is_what_shapes_the_graph(monkeypatch):
    torch.manual_seed(0)
    net = Net().eval()
    full = tracejit.trace(net, torch.randn(2, 4))
    assert full.graph.nodes[0].op == GUARD and full.graph.nodes[0].attrs["kind"] == "training"
    assert "cos" not in full.block.code
    monkeypatch.setattr(pipeline, "TRACE_PIPELINE", (("add_training_guard", pipeline.add_training_guard),))
    kept = tracejit.trace(net, torch.randn(2, 4))
    assert "cos" in kept.block.code                  # no dead-code elimination listed, none ran
    monkeypatch.setattr(pipeline, "TRACE_PIPELINE", ())
    bare = tracejit.trace(net, torch.randn(2, 4))
    assert not any(n.op == GUARD for n in bare.graph.nodes)
    x = torch.randn(3, 4)
    for traced in (full, kept, bare):
        torch.testing.assert_close(traced(x), net(x))


def test_a_pass_that_breaks_the_graph_is_named(monkeypatch):
    def drop_first_op(graph):
        graph.nodes = [n for n in graph.nodes if n.op != "aten::mul.Tensor"]
        return graph

    monkeypatch.setattr(pipeline, "VERIFY_EACH", True)
    monkeypatch.setattr(pipeline, "TRACE_PIPELINE", (("drop_first_op", drop_first_op),) + pipeline.TRACE_PIPELINE)
    with pytest.raises(RuntimeError, match="trace pass drop_first_op produced an invalid graph"):
        tracejit.trace(lambda a, b: (a * b).relu(), (torch.randn(3), torch.randn(3)))
