"""``torch.backends`` flags read by forward are guarded (trace/backend_flags.py, hunt20 C).

Traced with the flag one way, called after flipping it: eager takes the other branch; torch.jit.trace's program
(and tracejit's before) silently kept the trace's. Now the traced object gives eager's answer (it retraces
on the failed guard) and a loaded program raises GuardError naming the line.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import warnings

import pytest
import torch

import tracejit
from tracejit.errors import GuardError
from trace_testlib import marker_lines

LINE = marker_lines(inspect.getsourcefile(inspect.currentframe()))


class Cudnn(torch.nn.Module):
    def forward(self, x):
        if torch.backends.cudnn.enabled:  # @cudnn
            return x * 2
        return x * 3


class Tf32(torch.nn.Module):
    def forward(self, x):
        return x * (2 if torch.backends.cuda.matmul.allow_tf32 else 3)  # @tf32


class MkldnnEnabled(torch.nn.Module):
    def forward(self, x):
        return x * (2 if torch.backends.mkldnn.enabled else 3)  # @mkldnn


class Fastpath(torch.nn.Module):
    def forward(self, x):
        return x * (2 if torch.backends.mha.get_fastpath_enabled() else 3)  # @fastpath


@contextlib.contextmanager
def _flipped(marker):
    if marker == "cudnn":   # flags(): another test may have called torch.backends.disable_global_flags()
        with torch.backends.cudnn.flags(enabled=not torch.backends.cudnn.enabled):
            yield
    elif marker == "tf32":
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = not old
        yield
        torch.backends.cuda.matmul.allow_tf32 = old
    elif marker == "mkldnn":
        with torch.backends.mkldnn.flags(enabled=not torch.backends.mkldnn.enabled):
            yield
    else:
        old = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(not old)
        yield
        torch.backends.mha.set_fastpath_enabled(old)


def _saved(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


CASES = [(Cudnn, "cudnn"), (Tf32, "tf32"), (MkldnnEnabled, "mkldnn"), (Fastpath, "fastpath")]


@pytest.mark.parametrize("cls, marker", CASES, ids=[c[1] for c in CASES])
def test_a_flag_flipped_after_the_trace_is_guarded(cls, marker):
    m = cls().eval()
    x = torch.randn(4)
    traced = tracejit.trace(m, (x,))
    loaded = _saved(traced)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jit = torch.jit.trace(m, (x,))
    y = torch.randn(5)
    torch.testing.assert_close(traced(y), m(y), rtol=0, atol=0)
    with _flipped(marker):
        eager = m(y)
        assert not torch.equal(jit(y), eager)          # torch.jit: the trace's branch, silently
        torch.testing.assert_close(traced(y), eager, rtol=0, atol=0)   # retraced on the failed guard
        with pytest.raises(GuardError, match=rf"test_backend_flags.py:{LINE(marker)}\b"):
            loaded(y)
    torch.testing.assert_close(loaded(y), m(y), rtol=0, atol=0)


def test_torch_s_own_reads_are_not_guarded():
    m = torch.nn.Sequential(torch.nn.BatchNorm1d(3)).eval()   # F.batch_norm reads cudnn.enabled for the kernel
    traced = tracejit.trace(m, (torch.randn(2, 3),))
    assert "torch.backends" not in traced.code
