"""Issue #20 item 6: two GuardError paths that were unclear, each tested naming its line.

- A live traced object holds its original: when its retraces cannot fit the call either, the error says it
  retraced (it used to end with the advice for objects that hold no original, as if it held none); a loaded
  program keeps that advice.
- A guard made inside numpy (``np.linspace(0, 1, n)``, ``np.zeros((n, 2))``) names the user's line that called
  numpy, never numpy's own file; so does one made inside the standard library (``copy.copy(n)``).
"""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

import tracejit
from trace_testlib import marker_lines, roundtrip


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def offset_scale(x):
    return x * (x.storage_offset() + 1)  # @offset_scale


def linspace_ramp(x):
    ramp = np.linspace(0.0, 1.0, x.size(0))  # @linspace_ramp
    return x * torch.from_numpy(ramp).float()


def zeros_count(x):
    return x.sum() * np.zeros((x.size(0), 2)).size  # @zeros_count


def copied_size(x):
    return x * copy.copy(x.size(0))  # @copied_size


LINE = marker_lines(__file__)


def test_live_object_whose_retraces_do_not_fit_says_it_holds_its_original(monkeypatch):
    import tracejit.runtime.undo as undo
    monkeypatch.setattr(undo, "_same_layout_copy", lambda x: x.clone())   # a retrace copy that loses the offset
    traced = quiet(tracejit.trace, offset_scale, (torch.randn(2, 3),), check_trace=False)
    view = torch.randn(3, 3)[1:]
    with pytest.raises(tracejit.GuardError) as info:
        quiet(traced, view)
    text = str(info.value)
    assert "holds its original and traced it again" in text, text
    assert "holds no original" not in text and "a loaded program (or one whose original was dropped)" not in text
    assert (info.value.source.filename, info.value.source.lineno) == (__file__, LINE("offset_scale"))
    assert f"test_guard_messages.py:{LINE('offset_scale')}" in text


def test_with_faithful_copies_the_same_call_retraces_and_answers():
    traced = quiet(tracejit.trace, offset_scale, (torch.randn(2, 3),), check_trace=False)
    view = torch.randn(3, 3)[1:]
    torch.testing.assert_close(quiet(traced, view), offset_scale(view))


def test_loaded_program_says_it_cannot_retrace_naming_the_line():
    loaded = roundtrip(quiet(tracejit.trace, offset_scale, (torch.randn(2, 3),), check_trace=False))
    with pytest.raises(tracejit.GuardError) as info:
        loaded(torch.randn(3, 3)[1:])
    text = str(info.value)
    assert "a loaded program (or one whose original was dropped) cannot" in text
    assert "traced it again" not in text
    assert f"test_guard_messages.py:{LINE('offset_scale')}" in text


@pytest.mark.parametrize("fn", [linspace_ramp, zeros_count, copied_size], ids=lambda f: f.__name__)
def test_guard_made_inside_numpy_or_the_standard_library_names_the_user_line(fn):
    loaded = roundtrip(quiet(tracejit.trace, fn, (torch.randn(3),), check_trace=False))
    with pytest.raises(tracejit.GuardError) as info:
        loaded(torch.randn(5))
    source = info.value.source
    assert (source.filename, source.lineno) == (__file__, LINE(fn.__name__)), str(info.value)
    assert f"test_guard_messages.py:{LINE(fn.__name__)}" in str(info.value)
    assert "numpy" + __import__("os").sep not in str(info.value) and "copy.py" not in str(info.value)
