"""Forward that leaves grad mode switched for its caller (trace/grad_mode.py ``exit``, hunt20 F).

``torch.set_grad_enabled(False)`` without a restore: eager leaves the caller in no-grad; torch.jit.trace's
program (and tracejit's before) did not, so the caller's next step built (or did not build) autograd history
where eager's would not. The program now replays the bare call's mode at its end, live, saved and loaded,
optimized; a bare call undone by a block's exit or used as a context manager changes nothing.
"""
from __future__ import annotations

import io
import warnings

import pytest
import torch

import tracejit


class LeavesNoGrad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        torch.set_grad_enabled(False)
        return self.lin(x)


class LeavesGrad(torch.nn.Module):
    def forward(self, x):
        torch.set_grad_enabled(False)
        s = (x * 2).sum()
        torch.set_grad_enabled(True)
        return x + s


class ContextOnly(torch.nn.Module):
    def forward(self, x):
        with torch.set_grad_enabled(False):
            y = x * 2
        with torch.no_grad():
            torch.set_grad_enabled(True)   # undone by the block's exit
            z = x * 3
        return y + z


def _saved(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


def _mode_after(program, caller_grad: bool) -> bool:
    prev = torch.is_grad_enabled()
    try:
        torch.set_grad_enabled(caller_grad)
        program(torch.randn(2, 3))
        return torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(prev)


@pytest.mark.parametrize("cls", [LeavesNoGrad, LeavesGrad, ContextOnly], ids=lambda c: c.__name__)
def test_the_caller_is_left_in_eager_s_grad_mode(cls):
    m = cls().eval()
    traced = tracejit.trace(m, (torch.randn(4, 3),))
    programs = [traced, _saved(traced), tracejit.optimize_for_inference(traced)]
    for caller_grad in (True, False):
        eager = _mode_after(m, caller_grad)
        for program in programs:
            assert _mode_after(program, caller_grad) == eager, (type(program).__name__, caller_grad)


def test_torch_jit_leaves_the_caller_s_mode_unchanged():
    m = LeavesNoGrad().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jit = torch.jit.trace(m, (torch.randn(4, 3),))
    torch.set_grad_enabled(True)
    assert _mode_after(jit, True) != _mode_after(m, True)
