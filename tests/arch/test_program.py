"""The traced program as plain, immutable data (tracejit/program.py, issue #24 item 1): what trace records,
what the runtime compiles (runtime/assemble.py) and gives back (``traced.program``), what save writes."""
import dataclasses
import io
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.program import ModuleEntry, Program
from tracejit.runtime.assemble import compile_program
from tracejit.runtime.traced import program_of


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scale", torch.tensor(2.0))
        self.register_buffer("scratch", torch.zeros(1), persistent=False)

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Block()
        self.b = self.a          # shared: one entry, two children naming it
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.b(self.a(x)))


def test_a_module_program_holds_the_tree_tensors_and_graphs_as_data():
    net = Net().eval()
    traced = tracejit.trace(net, torch.randn(3, 4))
    p = traced.program
    assert isinstance(p, Program) and p.kind == "module" and p.name == "Net" and p.entry_points == ("forward",)
    assert [m.path for m in p.modules] == ["", "a", "a.lin", "head"]
    assert dict(p.root.children) == {"a": "a", "b": "a", "head": "head"}
    assert p.module("a.lin").parameters[0][1] is net.a.lin.weight      # the very tensors, not copies
    assert p.module("a").non_persistent == frozenset({"scratch"})
    assert p.training is False and p.graph() is traced.graph
    assert p.out_spec() is traced.graph.out_spec
    assert {(path, m) for path, m, _ in p.graphs()} >= {("", "forward"), ("a", "forward"), ("head", "forward")}
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.name = "Other"
    with pytest.raises(KeyError, match="no traced method 'backward'"):
        p.root.method("backward")
    with pytest.raises(ValueError, match="first module entry must be the root"):
        Program("module", "X", (ModuleEntry("a", "A", False),))


def test_the_runtime_compiles_a_program_into_an_object_that_runs_as_eager():
    net = Net().eval()
    traced = tracejit.trace(net, torch.randn(3, 4))
    again = compile_program(traced.program)
    x = torch.randn(7, 4)   # another batch size than the trace's
    assert not torch.equal(net(x), net(torch.randn(7, 4)))   # the input moves eager's output
    torch.testing.assert_close(again(x), net(x))
    assert again.a is again.b and again.a.lin.weight is net.a.lin.weight
    again(x).sum().backward()
    assert net.a.lin.weight.grad is not None and net.a.lin.weight.grad.abs().sum() > 0


def test_a_function_program_and_its_specializations():
    def f(x):
        if x.shape[0] > 2:
            return x * 2
        return x - 1

    with pytest.warns(tracejit.TracerWarning, match="traced size was used in 'gt'"):
        traced = tracejit.trace(f, torch.ones(4))
    assert traced.program.kind == "function" and traced.program.specializations == ()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(traced(torch.ones(1)), f(torch.ones(1)))   # a guard fails: a second trace
    p = program_of(traced)
    assert len(p.specializations) == 1 and p.specializations[0].method == "forward"
    assert p.specializations[0].reason.endswith("trace value 4, now 1")
    assert p.specializations[0].source.lineno == f.__code__.co_firstlineno + 1
    assert [name for _, name, _ in p.graphs()] == ["forward", "forward#2"]
    with pytest.raises(ValueError, match="later specializations"):
        compile_program(p)


def test_a_saved_program_loads_with_the_same_program():
    net = Net().eval()
    traced = tracejit.trace(net, torch.randn(3, 4))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    before, after = traced.program, loaded.program
    assert [(m.path, m.type_name, m.training, m.children, m.method_names, m.non_persistent) for m in before.modules] \
        == [(m.path, m.type_name, m.training, m.children, m.method_names, m.non_persistent) for m in after.modules]
    for m0, m1 in zip(before.modules, after.modules):
        for (n0, t0), (n1, t1) in zip(m0.parameters + m0.buffers, m1.parameters + m1.buffers):
            assert n0 == n1 and torch.equal(t0, t1)
    x = torch.randn(5, 4)
    torch.testing.assert_close(loaded(x), net(x))


def test_a_submodule_named_program_keeps_its_name():
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.program = nn.Linear(2, 2)

        def forward(self, x):
            return self.program(x)

    traced = tracejit.trace(Holder(), torch.ones(1, 2))
    assert isinstance(traced.program, nn.Module)          # as eager: the attribute is the submodule
    assert program_of(traced).module("program").type_name == "Linear"


def test_program_of_refuses_what_is_not_traced():
    with pytest.raises(TypeError, match="expected a TracedFunction or TracedModule"):
        program_of(nn.Linear(2, 2))
