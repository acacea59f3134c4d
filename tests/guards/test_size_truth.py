"""``bool()`` of a traced size guards its truth (``size != 0``), not its value: LongT5's ``if not all(x.shape):``
pinned the exact batch and length, so the program traced again for every new length and the raw ONNX export fixed
both (breadth27). The guard still fails where the truth changes (an empty dimension)."""
from __future__ import annotations

import warnings

import pytest
import torch

import tracejit


def _empty_or_scaled(x):
    if not all(x.shape):   # modeling_longt5.py's test for an empty input
        return x.new_zeros(x.shape[:-1])
    return x.sum(-1) * x.size(1)


def _traced():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(_empty_or_scaled, torch.randn(2, 16))
    traced.drop_original()   # a failed guard now raises instead of tracing again
    return traced


@pytest.mark.parametrize("shape", [(2, 16), (3, 24), (1, 5), (7, 1)])
def test_a_new_nonzero_size_runs_the_same_trace(shape):
    traced = _traced()
    x = torch.randn(shape)
    assert not torch.equal(_empty_or_scaled(x), _empty_or_scaled(torch.randn(shape)))   # the input moves the output
    torch.testing.assert_close(traced(x), _empty_or_scaled(x))
    assert len(traced.specializations) == 1


def test_an_empty_dimension_fails_the_guard_at_its_line():
    with pytest.raises(tracejit.GuardError, match=r"test_size_truth\.py:\d+"):
        _traced()(torch.randn(2, 0))


def test_a_live_program_traces_the_empty_branch_again():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(_empty_or_scaled, torch.randn(2, 16))
        x = torch.randn(3, 0)
        torch.testing.assert_close(traced(x), _empty_or_scaled(x))
    torch.testing.assert_close(traced(torch.ones(2, 5)), _empty_or_scaled(torch.ones(2, 5)))
