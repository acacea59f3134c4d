"""Random sizes through size-reading models: eager's answer in memory, eager's answer or GuardError loaded."""
from __future__ import annotations

import io

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tracejit
from trace_testlib import quiet
from patterns import TFSamePadConv, WindowPad, chunked_loop, odd_channels


def _traced_and_loaded(fn, example):
    traced = quiet(tracejit.trace, fn, example, check_trace=False)
    buf = io.BytesIO()
    tracejit.save(quiet(tracejit.trace, fn, example, check_trace=False), buf)
    buf.seek(0)
    return traced, tracejit.load(buf)


torch.manual_seed(0)
_WINDOW = WindowPad().eval()
_CONV = TFSamePadConv().eval()
_CASES = {
    "window": (_WINDOW, (torch.randn(1, 8, 8, 3),), lambda h, w: (torch.randn(1, h, w, 3),)),
    "conv": (_CONV, (torch.randn(1, 2, 16, 16),), lambda h, w: (torch.randn(1, 2, h + 3, w + 3),)),
    "chunks": (chunked_loop, (torch.randn(2, 4, 3),), lambda h, w: (torch.randn(2, h, 3),)),
    "odd": (odd_channels, (torch.randn(2, 4, 3),), lambda h, w: (torch.randn(2, h + 1, w),)),
}
_PROGRAMS = {k: _traced_and_loaded(fn, ex) for k, (fn, ex, _) in _CASES.items()}


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(sorted(_CASES)), st.integers(1, 13), st.integers(1, 13))
def test_random_sizes_never_silently_wrong(name, h, w):
    fn, _, make = _CASES[name]
    traced, loaded = _PROGRAMS[name]
    inputs = make(h, w)
    with torch.no_grad():
        expected = fn(*inputs)
        torch.testing.assert_close(quiet(traced, *inputs), expected, rtol=1e-4, atol=1e-5)
        try:
            got = loaded(*inputs)
        except tracejit.GuardError:
            return
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert len(traced.specializations) <= 8
