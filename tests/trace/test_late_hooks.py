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
