"""The validator's binding of each overloaded ATen node serves the call-time budget plan (session 30): a load binds
a node to its schema once, not once to validate it and again to plan its size check. The plan's checks must be the
ones a second binding makes, an entry must serve its own node alone, and none is kept after the load."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
import torch.nn.functional as F

import tracejit
from tracejit.serialize import budget_plan, read_program, validate


class Grow(torch.nn.Module):
    """Sizes that follow the input: a factory, a broadcast, an expand and a pad, each size-checked at a call."""

    def forward(self, x):
        n = x.size(0)
        return torch.zeros([n * 3, 4]) + x.sum(), x.expand(2, -1, -1).contiguous(), F.pad(x, (0, n))


@pytest.fixture
def saved(monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")   # every load checks and generates (no code cache)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(Grow(), (torch.randn(3, 2),))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return buf.getvalue()


def _unbound(monkeypatch):
    """The validator leaves no bindings: the plan binds every node itself (the load before session 30)."""
    check_node = validate.check_node

    def without(node, at, graph, module_tree, methods_of, max_elements=validate.DEFAULT_MAX_ELEMENTS, ops=None,
                bindings=None):
        return check_node(node, at, graph, module_tree, methods_of, max_elements, ops, None)
    monkeypatch.setattr(validate, "check_node", without)


def test_the_loaded_code_and_its_checks_are_what_binding_again_makes(saved, monkeypatch):
    reused = tracejit.load(io.BytesIO(saved))
    _unbound(monkeypatch)
    again = tracejit.load(io.BytesIO(saved))
    assert "_tj_budget" in reused.code and reused.code == again.code
    made = [getattr(v, "made_of", None) for k, v in sorted(reused._traced_methods["forward"].__globals__.items()) if k.startswith("_tj_b")]
    assert made == [getattr(v, "made_of", None) for k, v in sorted(again._traced_methods["forward"].__globals__.items())
                    if k.startswith("_tj_b")]
    for shape in ((5, 2), (7, 3)):   # new sizes: the outputs move, and both answer as eager
        x = torch.randn(*shape)
        want = Grow()(x)
        assert want[0].shape[0] == 3 * shape[0]
        for got in (reused(x), again(x)):
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w)


def test_an_entry_serves_its_own_node_alone(saved):
    program = read_program(io.BytesIO(saved))   # decoded and validated, nothing generated
    graph = program.modules[0].methods[0][1]
    plan = graph.call_budget
    zeros = next(n for n in graph.nodes if n.op == "aten::zeros.default")
    kept = plan.bound_at_load[id(zeros)]
    assert kept[0] is zeros and set(kept[1]) >= {"size"}
    # an entry under this node's id that another node left (an id reused after a graph was dropped): not used
    other = next(n for n in graph.nodes if n is not zeros and n.op.startswith("aten::"))
    plan.bound_at_load[id(zeros)] = (other, {"size": [1, 1]}, kept[2])
    _, bound, _ = plan.check_for(zeros)
    assert bound["size"] is zeros.args[0] or bound["size"] == zeros.args[0]
    assert id(zeros) not in plan.bound_at_load   # asked once: not kept


def test_nothing_is_kept_after_the_load(saved):
    loaded = tracejit.load(io.BytesIO(saved))
    plans = [m.graph.call_budget for m in loaded._traced_methods.values()]
    assert plans and all(not p.bound_at_load for p in plans)
