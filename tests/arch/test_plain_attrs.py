"""Node attributes are plain data (issue #24 item 3): ``ir.PLAIN_ATTR_TYPES`` (None, bool, int, float, str,
torch.dtype / device / layout / memory_format) nested in tuples, lists and str-keyed dicts. The live objects a
program runs sit in the graph's tables: a callee is named by (path, method) and linked in ``Graph.callees``,
an in-memory kernel is the lowered program's ``kernels[attrs.index]`` (passes/lowered.py), a custom autograd
Function ``Graph.functions[id]``.
The verifier refuses any other attribute, so every graph a trace, a pass or the loader makes is checked;
these tests walk the graphs of programs that exercise every tracejit op (the model corpus gets the same walk
in tests/models/corpus_tests.py, on its traced programs and on the files a fresh process loads)."""
from __future__ import annotations

import io
import math
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.passes import numpy_regions
from tracejit.ir import PLAIN_ATTR_TYPES, Node, is_plain, verify
from tracejit.ir.verify import VerificationError


def all_graphs(program):
    """Every graph of a Program: each module's methods, the specializations, and every graph they call."""
    todo, seen = [g for _, _, g in program.graphs()], set()
    while todo:
        g = todo.pop()
        if id(g) not in seen:
            seen.add(id(g))
            yield g
            todo += list(g.callees.values())


def impure_attrs(graphs) -> list:
    return [(n.op, k, type(v).__name__) for g in graphs for n in g.nodes for k, v in n.attrs.items() if not is_plain(v)]


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, outer):
        return torch.relu(self.lin(x)) + outer.t()[: x.shape[1]].t()   # outer's tensor captured below


class Zoo(nn.Module):
    """Submodule calls with captures, an autograd Function, size math (sym_math), guards of several kinds,
    dtype / device reads, a grad-mode region, a seeded generator, a convolution and linear layers."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.inner = Inner()
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(8, 4)

    def forward(self, img, x):
        h = torch.relu(self.conv(img)).mean((2, 3))
        half = math.ceil(x.shape[0] / 2)
        if x.shape[0] > 3:   # batch 3 (specialize_for) takes the other branch
            x = x * 1.5
        y = self.inner(x + h[: x.shape[0]], x)
        y = Scale.apply(y)
        with torch.no_grad():
            z = y.to(x.dtype).float()
        g = torch.Generator().manual_seed(3)
        noise = torch.rand(y.shape, generator=g) * 0
        return self.head(self.drop(z + noise))[:half]


def _programs():
    torch.manual_seed(0)
    model = Zoo().eval()
    img, x = torch.randn(4, 3, 8, 8), torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (img, x), specialize_for=[(torch.randn(3, 3, 8, 8), torch.randn(3, 8))])
        optimized = tracejit.optimize_for_inference(traced)
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    loaded = tracejit.load(io.BytesIO(buf.getvalue()))
    return model, (img, x), traced, optimized, loaded


def test_every_graph_of_traced_optimized_and_loaded_programs_holds_plain_attributes(monkeypatch):
    # the toy's numpy kernel must be fused for its attributes to be checked, though it holds under half of the
    # toy's compute ops (passes/numpy_regions.py MIN_SHARE)
    monkeypatch.setattr(numpy_regions, "MIN_SHARE", 0.0)
    model, (img, x), traced, optimized, loaded = _programs()
    ops = {n.op for g in all_graphs(traced.program) for n in g.nodes}
    assert {"tracejit::call_module", "tracejit::autograd_function", "tracejit::sym_math", "tracejit::guard",
            "tracejit::new_generator", "tracejit::seed_generator"} <= ops   # the walk sees the live-object ops
    assert len(traced.program.specializations) == 1
    run_graph = optimized.forward.run_graph
    assert any(n.op == "tracejit::kernel" for n in run_graph.nodes)        # in-memory kernels
    graphs = [*all_graphs(traced.program), *all_graphs(optimized.program), *all_graphs(loaded.program), run_graph]
    assert impure_attrs(graphs) == []
    # the live objects are in the tables the attributes index / name
    fn_nodes = [(g, n) for g in all_graphs(traced.program) for n in g.nodes if n.op == "tracejit::autograd_function"]
    assert len(fn_nodes) == 2   # the first trace's and the specialization's
    assert all(g.functions[n.attrs["function_id"]] is Scale for g, n in fn_nodes)
    lowered = optimized.forward.lowered   # the kernels live in the lowered program, not in any Graph
    assert lowered.graph is run_graph and lowered.kernels
    assert all(callable(lowered.kernel(n)) for n in run_graph.nodes if n.op == "tracejit::kernel")
    assert all(not hasattr(g, "kernels") for g in graphs)
    root = traced.program.graph()
    assert all(root.callee(n).name == "forward" for n in root.nodes if n.op == "tracejit::call_module")
    # and they run as eager does on another batch
    img2, x2 = torch.randn(6, 3, 8, 8), torch.randn(6, 8)
    assert not torch.equal(model(img2, x2), model(torch.randn(6, 3, 8, 8), torch.randn(6, 8)))
    for program in (traced, optimized, loaded):
        torch.testing.assert_close(program(img2, x2), model(img2, x2), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("value, plain", [
    (None, True), (True, True), (3, True), (2.5, True), ("s", True), (torch.float16, True),
    (torch.device("cpu"), True), (torch.strided, True), (torch.channels_last, True),
    ([1, (2, "a")], True), ({"k": [None, 1.0]}, True),
    (torch.Size([2]), False), ({1: "int key"}, False), (nn.Linear, False), (torch.ones(1), False),
    (lambda: 0, False), (object(), False), (Scale, False),
])
def test_the_plain_set_is_exactly_documented(value, plain):
    assert PLAIN_ATTR_TYPES == (type(None), bool, int, float, str, torch.dtype, torch.device, torch.layout,
                                torch.memory_format)
    assert is_plain(value) is plain


def test_the_verifier_refuses_a_live_object_in_an_attribute():
    traced = tracejit.trace(lambda x: x + 1, (torch.randn(2),))
    g = traced.graph
    verify(g)
    g.nodes[0].attrs["kernel"] = torch.relu
    try:
        with pytest.raises(VerificationError, match="attribute 'kernel' holds a builtin_function_or_method; "
                                                    "node attributes are plain data"):
            verify(g)
    finally:
        del g.nodes[0].attrs["kernel"]
    node = Node("tracejit::call_module", "", (), attrs={"path": "sub", "method": "forward", "n_captures": 0})
    with pytest.raises(KeyError, match="calls sub.forward, which its link table does not hold"):
        g.callee(node)
