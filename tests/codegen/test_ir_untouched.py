"""Codegen, compiling and the loader read the IR and never write into it.

A structural fingerprint of every graph of a nested module (following call_module links into the
callees) is the same before and after generating code, compiling, saving and loading.
"""
from __future__ import annotations

import io

import pytest
import torch
import torch.nn as nn

import tracejit
from tracejit.codegen.python import generate
from tracejit.ir import Graph, Value
from tracejit.runtime.traced import compile_method
from tracejit.passes.pipeline import run_trace_pipeline
from tracejit.trace.api import record

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class Pair(nn.Module):
    """Returns a tuple (the caller unpacks the callee's output structure) and has an in-place candidate."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return h.sigmoid(), (h * 3).tanh()


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Pair()
        self.b = Pair()

    def forward(self, x):
        p, q = self.a(x)
        r, s = self.b(q)
        return p + r, {"s": s.exp()}


def fingerprint(graph: Graph, seen=None) -> tuple:
    """Everything a graph says, as plain data: ops, targets, argument wiring, attributes, types, specs."""
    seen = {} if seen is None else seen
    number: dict[int, int] = {}

    def val(a):
        if isinstance(a, Value):
            return ("v", number[id(a)])
        if isinstance(a, (list, tuple)):
            return (type(a).__name__,) + tuple(val(x) for x in a)
        if isinstance(a, dict):
            return ("dict",) + tuple((k, val(v)) for k, v in a.items())
        if isinstance(a, Graph):
            if id(a) not in seen:
                seen[id(a)] = None
                seen[id(a)] = fingerprint(a, seen)
            return ("graph", seen[id(a)])
        return repr(a)

    for v in graph.inputs:
        number[id(v)] = len(number)
    nodes = []
    for node in graph.nodes:
        row = (node.op, str(node.target), val(node.args), val(node.kwargs),
               tuple(sorted((k, val(v)) for k, v in node.attrs.items() if (k, v) != ("line", ""))),  # not saved
               node.effectful, str(node.source))
        for v in node.outputs:
            if v is not None:
                number[id(v)] = len(number)
        nodes.append(row + (tuple(None if v is None else (str(v.type), v.dynamic) for v in node.outputs),))
    return (graph.name, graph.training, repr(graph.in_spec), repr(graph.out_spec), len(graph.constants),
            tuple((str(v.type), v.hint) for v in graph.inputs), tuple(nodes), val(graph.outputs))


def _graphs(traced) -> list[Graph]:
    return [fn.graph for _, m in traced.named_modules() for fn in getattr(m, "_traced_methods", {}).values()]


def _save_load(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return tracejit.load(io.BytesIO(buf.getvalue()))


def _fresh_recording(model, x) -> list[Graph]:
    """The graphs of one trace, before anything compiled them: the root first, then each submodule method."""
    rec = record(model, (x,), {}, model, warn=False, signature_of=model.forward, finish=run_trace_pipeline)
    return [rec.graph] + [g for methods in rec.methods.values() for g in methods.values()]


def test_generating_and_compiling_leave_the_graph_unchanged():
    torch.manual_seed(0)
    model = Outer().eval()
    graphs = _fresh_recording(model, torch.randn(3, 4))
    assert any(n.op == "tracejit::call_module" for n in graphs[0].nodes)
    before = [fingerprint(g) for g in graphs]
    codes = []
    for g in graphs:
        generate(g, "forward", guards=True)
        codes.append(compile_method(g, "forward", "again", guards=g is graphs[0]).code)
    assert "self._modules['a'].forward(" in codes[0] and "sigmoid" in "".join(codes)
    assert [fingerprint(g) for g in graphs] == before


def test_saving_and_loading_leave_the_graphs_unchanged():
    torch.manual_seed(0)
    model = Outer().eval()
    x = torch.randn(3, 4)
    pristine = fingerprint(_fresh_recording(model, x)[0])
    traced = tracejit.trace(model, x, strict=False)
    assert fingerprint(traced.graph) == pristine
    loaded = _save_load(traced)
    assert fingerprint(traced.graph) == pristine
    assert fingerprint(loaded.graph) == pristine     # the loader rebuilds the same IR, links to callees too
    loaded_graphs = _graphs(loaded)
    loaded_before = [fingerprint(g) for g in loaded_graphs]
    _save_load(loaded)
    assert [fingerprint(g) for g in loaded_graphs] == loaded_before

    x2 = torch.randn(5, 4)
    expected = model(x2)
    reference = torch.jit.trace(model, x, strict=False)(x2)
    for got in (traced(x2), loaded(x2)):
        torch.testing.assert_close(got[0], expected[0])
        torch.testing.assert_close(got[1]["s"], expected[1]["s"])
        torch.testing.assert_close(got[0], reference[0])
    with torch.no_grad():    # the in-place forms run and give the same numbers
        torch.testing.assert_close(loaded(x2)[1]["s"], expected[1]["s"])


class Act(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = act

    def forward(self, x):
        return self.act(self.fc(x)) + x


def test_a_stored_graph_shared_by_modules_with_other_callees_is_linked_per_module():
    """Blocks 1 and 2 share one stored graph but call an Identity and a ReLU: each gets its own links."""
    torch.manual_seed(0)
    model = nn.Sequential(Act(nn.ReLU()), Act(nn.Identity()), Act(nn.ReLU())).eval()
    traced = tracejit.trace(model, torch.randn(2, 4))
    loaded = _save_load(traced)
    blocks = [loaded.get_submodule(str(i)) for i in range(3)]
    links = [b.graph.callee(next(n for n in b.graph.nodes if n.attrs.get("path") == "act")) for b in blocks]
    assert links == [blocks[i].get_submodule("act").graph for i in range(3)]
    assert links[1] is not links[2] and str(blocks[1].graph) == str(blocks[2].graph)
    assert str(loaded.inlined_graph).count("aten::relu") == 2
    x = torch.randn(5, 4)
    torch.testing.assert_close(loaded(x), model(x))
    torch.testing.assert_close(loaded(x), torch.jit.trace(model, torch.randn(2, 4))(x))


class Redundant(nn.Module):
    """What the inference passes remove: an eval-mode dropout, a repeated expression, a dead value."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        h = self.drop(self.fc(x))
        x.cos()                                  # dead
        return h.tanh() + h.tanh()               # the second tanh is the first's


def test_the_inference_pipeline_leaves_the_traced_program_unchanged_and_stamps_each_pass():
    from tracejit.passes.pipeline import INFERENCE_PASSES, run_passes
    torch.manual_seed(0)
    model = Redundant().eval()
    traced = tracejit.trace(model, torch.randn(3, 4))
    graphs_before = [fingerprint(g) for _, _, g in traced.program.graphs()]
    program_before = traced.program
    optimized = tracejit.optimize_for_inference(traced)
    assert [fingerprint(g) for _, _, g in traced.program.graphs()] == graphs_before
    assert traced.program == program_before and traced.graph.passes == ()

    stamps = optimized.graph.passes   # freeze inlines the calls of fc and drop first: a pass of its own
    assert [name for name, _, _ in stamps] == ["inline_calls", "freeze"] + [name for name, _ in INFERENCE_PASSES]
    assert stamps[0][1] == len(traced.graph.nodes) and stamps[0][2] > stamps[0][1]   # 2 calls -> their nodes
    assert all(stamps[k][2] == stamps[k + 1][1] for k in range(len(stamps) - 1))   # each starts where the last ended
    removed = {name: before - after for name, before, after in stamps}
    assert removed["drop_identities"] >= 1 and removed["eliminate_common_subexpressions"] >= 1
    assert stamps[-1][2] == len(optimized.graph.nodes) < stamps[0][1]

    x = torch.randn(6, 4)                        # another batch size: the optimized program is eager's
    assert not torch.equal(model(x), model(torch.randn(6, 4)))
    torch.testing.assert_close(optimized(x), model(x))

    def unchanged(graph):                        # a pass with nothing to do returns its input
        return graph
    held = traced.graph
    out = run_passes(held, (("unchanged", unchanged),))
    assert out is not held and out.passes == (("unchanged", len(held.nodes), len(held.nodes)),)
    assert held.passes == ()                     # stamped on a copy: the user's graph is not written
