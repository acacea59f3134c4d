"""Hooks registered on a traced submodule after the trace (runtime/late_hooks.py): the traced parent's code would
not run them, where eager runs them on every call; torch.jit's traced modules skip them silently. Each case is
compared with eager and torch.jit.trace on a new input."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.runtime.late_hooks import LateHookError


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))


def _zero_output(mod, args, out):
    return out * 0


def _double_input(mod, args):
    return (args[0] * 2,)


HOOKS = {
    "forward": lambda m: m.register_forward_hook(_zero_output),
    "forward_pre": lambda m: m.register_forward_pre_hook(_double_input),
    "full_backward": lambda m: m.register_full_backward_hook(lambda mod, gi, go: None),
}


@pytest.mark.parametrize("kind", sorted(HOOKS))
@pytest.mark.parametrize("path", ["0", "1.1"])
def test_a_hook_on_a_traced_submodule_is_refused_not_skipped(kind, path):
    net, x, y = _net(), torch.randn(2, 3), torch.randn(5, 3)
    traced = tracejit.trace(net, (x,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jit = torch.jit.trace(net, (x,))
    before = jit(y)
    HOOKS[kind](jit.get_submodule(path))
    assert torch.equal(jit(y), before)   # torch.jit: the hook silently does nothing
    handle = HOOKS[kind](traced.get_submodule(path))
    with pytest.raises(LateHookError, match=f"hook on submodule '{path}' registered after the trace"):
        traced(y)
    handle.remove()
    torch.testing.assert_close(traced(y), net(y))   # removed: the traced program answers again


def test_the_same_hook_on_the_traced_root_runs_as_in_eager():
    net, x, y = _net(), torch.randn(2, 3), torch.randn(5, 3)
    traced = tracejit.trace(net, (x,))
    traced.register_forward_hook(_zero_output)
    net.register_forward_hook(_zero_output)
    torch.testing.assert_close(traced(y), net(y))
    assert not traced(y).any()


def test_a_hooked_submodule_called_on_its_own_runs_its_hook():
    net, x, y = _net(), torch.randn(2, 3), torch.randn(5, 4)
    traced = tracejit.trace(net, (x,))
    block = traced.get_submodule("1")
    block.register_forward_hook(_zero_output)
    assert not block(y).any()   # its own hook: eager's answer
    with pytest.raises(LateHookError):
        traced(torch.randn(5, 3))


COLLECTED: list = []   # what the lazily installed hooks put aside while a collecting call runs


class LazyHooks(nn.Module):
    """Installs forward hooks on its layers the first time a call asks to collect, and remembers that in an
    attribute: transformers' output capturing (``output_hidden_states=True``) works this way."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.installed = False

    def forward(self, x, collect: bool = False):
        if collect and not self.installed:
            for layer in self.layers:
                layer.register_forward_hook(lambda m, a, o: COLLECTED[-1].append(o) if COLLECTED else None)
            self.installed = True
        if collect:
            COLLECTED.append([])
        for layer in self.layers:
            x = layer(x)
        return {"last": x, "all": tuple(COLLECTED.pop()) if collect else ()}


def test_a_retrace_after_the_modules_hooks_changed_runs_them_as_eager_does():
    """One eager call with the flag installs the hooks on the original module; the traced program's guard on the flag
    then fails and it traces again. With the first trace's hooks (none) but the attribute saying they are there, that
    trace answered an empty ``all`` where eager has 3 (silently, before); it now runs the hooks the module has."""
    torch.manual_seed(0)
    net = LazyHooks().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(net, example_kwarg_inputs={"x": torch.randn(2, 4)}, strict=False)
        x = torch.randn(5, 4)
        torch.testing.assert_close(traced(x=x)["last"], net(x)["last"])
        assert len(net(x, collect=True)["all"]) == 3   # eager: the hooks are installed now
        got, want = traced(x=x, collect=True), net(x, collect=True)
        assert len(got["all"]) == len(want["all"]) == 3
        for g, w in zip(got["all"], want["all"]):
            torch.testing.assert_close(g, w)
        x2 = torch.randn(3, 4)
        torch.testing.assert_close(traced(x=x2)["last"], net(x2)["last"])   # the plain call: eager's answer too
        assert traced(x=x2)["all"] == ()


def test_tracing_the_first_call_that_installs_the_hooks_says_to_call_once_before():
    """Traced on the call that installs the hooks, the trace is refused (forward set ``installed``); the message
    says what works (serve25b: transformers users saw only 'keep state ... outside forward'), and it does."""
    torch.manual_seed(0)
    net = LazyHooks().eval()
    x = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(tracejit.TraceError, match="call the module once with the same arguments before tracing"):
            tracejit.trace(net, example_kwarg_inputs={"x": x, "collect": True}, strict=False)
        net = LazyHooks().eval()   # a module the refused trace never ran: its first call eagerly, then the trace
        net(x, collect=True)
        traced = tracejit.trace(net, example_kwarg_inputs={"x": x, "collect": True}, strict=False)
        x2 = torch.randn(3, 4)
        got, want = traced(x=x2, collect=True), net(x2, collect=True)
    assert len(got["all"]) == len(want["all"]) == 3
    torch.testing.assert_close(got["last"], want["last"])
