"""Helpers shared by the tests in tests/trace and tests/guards: source-line markers, the global-state
check, tracing without warnings, and a save/load round trip."""
from __future__ import annotations

import io
import warnings

import torch

import tracejit

_ORIGINAL_MODULE_CALL = torch.nn.Module.__call__
_ORIGINAL_JIT_IS_TRACING = torch.jit.is_tracing


def marker_lines(path: str):
    """``line_of(marker)`` for the file at ``path``: the 1-based line ending with ``# @<marker>``."""
    with open(path, encoding="utf-8") as fh:
        source = fh.read().splitlines()

    def line_of(marker: str) -> int:
        tag = "# @" + marker
        hits = [i + 1 for i, text in enumerate(source) if text.rstrip().endswith(tag)]
        assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
        return hits[0]

    return line_of


def snapshot_state():
    return {"grad": torch.is_grad_enabled(), "rng": torch.get_rng_state()}


def assert_state_clean(before):
    """Tracing left no global state changed."""
    assert torch.jit.is_tracing() is False
    assert tracejit.is_tracing() is False
    assert torch.jit.is_tracing is _ORIGINAL_JIT_IS_TRACING
    assert torch.nn.Module.__call__ is _ORIGINAL_MODULE_CALL
    assert torch._C._len_torch_function_stack() == 0
    assert len(torch.overrides._get_current_function_mode_stack()) == 0
    assert torch.is_grad_enabled() == before["grad"]
    assert torch.equal(torch.get_rng_state(), before["rng"])


def quiet(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with every warning silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def roundtrip(traced):
    """``traced`` saved to memory and loaded back."""
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)
