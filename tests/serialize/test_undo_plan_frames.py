"""The undo plan of a root method (runtime/undo.py) is found by following its submodule calls where they
stand, not by copying the whole program into one graph (a load compiles every root that writes in place
anywhere: Mask R-CNN copied 13,000 nodes per load for it). The plan must be the flat program's: each test
compares it with the plan of the inlined program (the former way, kept here as the reference) and checks that
a failed guard still puts every write back, on a traced and on a loaded program, on inputs other than the
traced ones, beside eager."""
from __future__ import annotations

import gc
import io
import warnings

import pytest
import torch
from torch import nn

import tracejit
import tracejit.passes.inline as inline
import tracejit.passes.written as written
from tracejit.ir import Value
from tracejit.runtime import undo

GUARD = "tracejit::guard"


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _roundtrip(traced):
    buf = io.BytesIO()
    _quiet(tracejit.save, traced, buf)
    buf.seek(0)
    return _quiet(tracejit.load, buf)


def _reference(graph):
    """The plan of the inlined program, as undo_plan found it before (session 28), as comparable data."""
    flat = inline.inline_calls(graph)
    nodes = list(flat.nodes)
    last = max((i for i, n in enumerate(nodes) if n.op == GUARD), default=-1)
    todo = [v for n in nodes[:last] if n.effectful and n.op != GUARD
            for v in list(n.input_values()) + [o for o in n.outputs if o is not None]]
    inputs, attrs, constants, seen = False, {}, {}, set()
    while todo:
        v = todo.pop()
        if not isinstance(v, Value) or id(v) in seen:
            continue
        seen.add(id(v))
        p = v.producer
        if p is None:
            inputs = True
        elif p.op == "tracejit::get_attr":
            attrs[p.attrs["path"]] = p.attrs.get("kind", "parameter")
        elif p.op == "tracejit::constant":
            t = flat.constants[p.attrs["index"]]
            if isinstance(t, torch.Tensor):
                constants[id(t)] = t
        elif p.op not in written.FRESH and written._may_alias(p.op):
            todo += list(p.input_values())
    if not (inputs or attrs or constants):
        return None
    return inputs, attrs, set(constants)


def _data(plan):
    return None if plan is None else (plan.inputs, dict(plan.attrs), {id(t) for t in plan.constants})


class Bump(nn.Module):
    """Writes into its argument (a view of the caller's input at one call, a fresh tensor at the other) and
    into its own buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count.add_(1)
        x.add_(10)
        return x * 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.bump = Bump()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        first = self.bump(x[:, :3])          # a view of the root's input: written through the call
        second = self.bump(self.lin(x[:, :3]))   # a fresh tensor: nothing of the caller's
        return first + second


class Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.other = Bump()

    def forward(self, img):
        y = self.block(img)
        if img.size(0) > 2:                  # the guard, after every write
            return y.relu()
        return y.tanh()


class Scale(nn.Module):
    def forward(self, x):
        return x.mul_(3)


class FreshOnly(nn.Module):
    """Writes in a submodule, but only into a tensor made in the call: no plan."""

    def __init__(self):
        super().__init__()
        self.inner = Scale()
        self.lin = nn.Linear(5, 3)

    def forward(self, img):
        z = self.inner(self.lin(img).relu())
        if img.size(0) > 2:
            return z.relu()
        return z.tanh()


@pytest.mark.parametrize("make", [Root, FreshOnly])
def test_plan_is_the_inlined_programs_traced_and_loaded(make):
    torch.manual_seed(0)
    traced = _quiet(tracejit.trace, make(), torch.randn(4, 5), check_trace=False)
    loaded = _roundtrip(traced)
    for prog in (traced, loaded):
        fn = prog._traced_methods["forward"]
        assert _data(undo.undo_plan(fn.graph)) == _reference(fn.graph)
        assert _data(fn.undo) == _reference(fn.graph)


def test_plan_names_the_nested_buffer_and_the_input_through_two_calls():
    traced = _quiet(tracejit.trace, Root(), torch.randn(4, 5), check_trace=False)
    plan = undo.undo_plan(traced._traced_methods["forward"].graph)
    assert plan.inputs   # the view of img written inside block.bump
    assert dict(plan.attrs) == {"block.bump.count": "buffer"}   # `other` is never called


def test_the_plan_does_not_copy_the_program(monkeypatch):
    traced = _quiet(tracejit.trace, Root(), torch.randn(4, 5), check_trace=False)
    graph = traced._traced_methods["forward"].graph

    def refuse(*a, **k):
        raise AssertionError("undo_plan inlined the program")

    monkeypatch.setattr(inline, "inline_calls", refuse)
    assert undo.undo_plan(graph) is not None


def test_a_failed_guard_puts_back_the_input_and_the_nested_buffer_loaded():
    torch.manual_seed(0)
    model = Root()
    loaded = _roundtrip(_quiet(tracejit.trace, model, torch.randn(4, 5), check_trace=False))
    img = torch.randn(6, 5)   # another batch: the same branch, answers as eager
    mine, theirs = img.clone(), img.clone()
    torch.testing.assert_close(_quiet(loaded, mine), model(theirs))
    torch.testing.assert_close(mine, theirs)   # written once, as eager writes it
    torch.testing.assert_close(loaded.block.bump.count, model.block.bump.count)
    small = torch.randn(2, 5)   # the other branch: the guard fails after the writes
    before, count = small.clone(), loaded.block.bump.count.clone()
    with pytest.raises(tracejit.GuardError):
        _quiet(loaded, small)
    torch.testing.assert_close(small, before)
    torch.testing.assert_close(loaded.block.bump.count, count)


def test_the_plan_leaves_no_cycles_for_the_collector():
    """A load runs with the collector paused (gc_pause.py): what undo_plan builds must be freed by reference
    counting, or the collection at the pause's end walks it."""
    traced = _quiet(tracejit.trace, Root(), torch.randn(4, 5), check_trace=False)
    graph = traced._traced_methods["forward"].graph
    was = gc.isenabled()
    gc.disable()
    try:
        assert undo.undo_plan(graph) is not None
        assert not [o for o in gc.get_objects() if type(o).__name__ == "_Frame"]
    finally:
        if was:
            gc.enable()
