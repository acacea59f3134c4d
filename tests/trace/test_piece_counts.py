"""The number of pieces ``unbind`` / ``split`` return is guarded before the op where it follows a size
(trace/pieces.py): generated code unpacks them into names, so another count raises GuardError naming the
line (a traced program holding its original retraces) instead of Python's "too many values to unpack"
inside the generated code; the same count at other sizes runs without a guard failing."""
from __future__ import annotations

import io
import warnings

import pytest
import torch

import tracejit


def first_plus_last(x):
    rows = x.unbind(0)
    return rows[0] * 2 + rows[-1]


def chunk_sums(x):
    return torch.stack([p.sum(1) for p in x.split(2, dim=1)], 1)


def chunked(x):
    a, *rest = x.chunk(3, dim=1)
    return a.sum(1) + len(rest)


def _loaded(traced):
    buf = io.BytesIO()
    traced.save(buf)
    buf.seek(0)
    return tracejit.load(buf)


@pytest.mark.parametrize("fn,example,same_count,other_count", [
    (first_plus_last, (2, 3), (2, 5), (3, 3)),
    (chunk_sums, (2, 5), (4, 6), (2, 7)),          # split(2) of 5 and 6 columns: 3 pieces; of 7: 4
    (chunked, (2, 6), (2, 8), (2, 2)),             # chunk(3) of 6 and 8 columns: 3 pieces; of 2: 2
])
def test_piece_count_is_guarded_before_the_unpack(fn, example, same_count, other_count):
    traced = tracejit.trace(fn, torch.randn(*example))
    loaded = _loaded(traced)
    x = torch.randn(*same_count)
    torch.testing.assert_close(loaded(x), fn(x))
    y = torch.randn(*other_count)
    assert fn(y).shape != fn(torch.randn(*example)).shape or fn is not chunk_sums
    with pytest.raises(tracejit.GuardError, match=r"test_piece_counts\.py:\d+ .*the number of pieces"):
        loaded(y)
    with pytest.warns(tracejit.TracerWarning, match="guard failed"):
        torch.testing.assert_close(traced(y), fn(y))


def test_torch_jit_trace_fails_inside_its_interpreter_where_tracejit_follows_the_count():
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.jit.trace(first_plus_last, torch.randn(2, 4))
        ours = tracejit.trace(first_plus_last, torch.randn(2, 4))
        torch.testing.assert_close(ours(x), first_plus_last(x))
    with pytest.raises(RuntimeError, match="TorchScript interpreter(.|\n)*Expected 2 elements in a list but found 3"):
        reference(x)
