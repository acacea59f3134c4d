"""Submodule training flags read during forward are guards (trace/module_flags.py; issue #20 item 2).

``model.eval(); model.drop.train()`` traces dropout's train-mode op; a call after the user switches that
submodule (or one that was in the root's mode) gives eager's answer (a live retrace) or a GuardError naming the
submodule: live, after save + load, and at optimize_for_inference (which fixes the flags it freezes).
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit
from trace_testlib import roundtrip


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)
        self.seq = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))
        self.bn = nn.BatchNorm1d(8)
        self.unused = nn.Dropout(0.5)   # never called: its flag is never read

    def forward(self, x):
        return self.bn(self.seq(self.drop(self.lin(x))))


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def seeded(fn, x, seed=0):
    torch.manual_seed(seed)
    return fn(x)


def make(train=()):
    torch.manual_seed(0)
    net = Net().eval()
    for path in train:
        net.get_submodule(path).train()
    return net


def assert_eager(program, net, x):
    torch.testing.assert_close(seeded(program, x), seeded(net, x))


X = torch.randn(16, 8)


def test_guards_name_every_read_submodule_and_not_the_unused_one():
    traced = quiet(tracejit.trace, make(["drop"]), (X,))
    guarded = {n.attrs["path"]: n.attrs["expected"] for n in traced.graph.nodes
               if n.op == "tracejit::guard" and n.attrs.get("path")}
    assert guarded == {"drop": True, "seq.1": False, "bn": False}   # lin reads no flag; unused is never called
    assert "self._modules['seq']._modules['1'].training" in traced.code


@pytest.mark.parametrize("traced_train,flip", [(["drop"], "drop"), ([], "drop"), ([], "seq.1"), (["bn"], "bn")],
                         ids=["switch_off_a_differing_one", "switch_on_one", "nested_in_sequential", "batch_norm"])
def test_live_flip_gives_eagers_answer(traced_train, flip):
    net = make(traced_train)
    traced = quiet(tracejit.trace, net, (X,))
    assert_eager(traced, net, X)
    for module in (net.get_submodule(flip), traced.get_submodule(flip)):
        module.train(not module.training)
    assert not torch.allclose(seeded(net, X), seeded(quiet(tracejit.trace, make(traced_train), (X,),
                                                              guards=False), X))   # the flip moves eager
    assert_eager(lambda x: quiet(traced, x), net, X)
    assert len(traced.specializations) == 2


@pytest.mark.parametrize("flip", ["drop", "seq.1"])
def test_loaded_program_raises_naming_the_submodule(flip):
    net = make(["drop"])
    loaded = roundtrip(quiet(tracejit.trace, net, (X,)))
    assert_eager(loaded, net, X)
    loaded.get_submodule(flip).train(not loaded.get_submodule(flip).training)
    with pytest.raises(tracejit.GuardError, match=f"submodule '{flip}' was traced in"):
        loaded(X)
    loaded.get_submodule(flip).train(not loaded.get_submodule(flip).training)
    assert_eager(loaded, net, X)


def test_optimize_for_inference_keeps_the_traced_flags_and_refuses_switched_ones():
    net = make(["drop"])
    traced = quiet(tracejit.trace, net, (X,))
    with torch.no_grad():
        program = tracejit.optimize_for_inference(traced)
        assert_eager(program, net, X)   # dropout still active in the optimized program, as in eager
        traced.drop.eval()
        with pytest.raises(tracejit.GuardError, match="submodule 'drop' was traced in train mode"):
            tracejit.optimize_for_inference(traced)


def test_flags_switched_inside_forward_and_restored_are_no_guard_trouble():
    class Toggle(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            self.drop.train()
            y = self.drop(x)
            self.drop.eval()
            return y
    net = Toggle().eval()
    traced = quiet(tracejit.trace, net, (X,))
    assert_eager(traced, net, X)   # the flag read in forward is the one forward set: the guard is on the call's


@pytest.mark.parametrize("path", ["drop'].__class__", "a..b", "", "x" * 300])
def test_a_file_guard_path_must_be_module_names(path):
    from tracejit.errors import LoadError
    from tracejit.serialize.guards import check_guard
    from tracejit.trace.module_flags import submodule_training_guard
    node = submodule_training_guard("drop", True)
    check_guard(node, "node 0")   # the path tracejit writes loads
    node.attrs["path"] = path
    with pytest.raises(LoadError, match="submodule path"):
        check_guard(node, "node 0")


def test_a_module_made_inside_forward_may_delete_its_training_flag_while_tracing():
    """torch.jit.script's RecursiveScriptModule deletes ``training`` in its __init__ (its flag lives in C++);
    the traced-flag property must let it, as nn.Module does (PyTorch's test_trace_nested_fn)."""
    class MakesAScriptedModule(nn.Module):
        def forward(self, x):
            scripted = torch.jit.script(nn.Hardtanh(-0.5, 0.5))
            assert "training" not in scripted.__dict__
            return scripted(x * 2)

    model = MakesAScriptedModule().eval()
    traced = tracejit.trace(model, (torch.randn(3, 4),), check_trace=False)
    x = torch.randn(5, 4)
    assert not torch.equal(model(x), model(torch.randn(5, 4)))   # the input moves the output
    assert torch.equal(traced(x), model(x))

    class Plain(nn.Module):
        def forward(self, x):
            inner = nn.Identity()
            del inner.training                    # as RecursiveScriptModule does
            with pytest.raises(AttributeError):
                inner.training
            with pytest.raises(AttributeError):
                del inner.training                # twice: AttributeError, as without tracing
            return x + 1

    traced = tracejit.trace(Plain(), (torch.zeros(2),))
    assert torch.equal(traced(torch.ones(3)), torch.full((3,), 2.0))
