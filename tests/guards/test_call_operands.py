"""A traced size beside an operator's operand that is a call (hunt30; trace/operand_calls.py, trace/operand_scan.py,
symbolic._declined): before, ``math.sqrt(d) * n``, ``self.scale() * n``, a comprehension's or a lambda's
``f(k) * k`` and ``n * make_complex()`` kept the trace's number at every size, live, optimized and loaded."""
from __future__ import annotations

import pytest
import torch

import tracejit
import call_operand_patterns as pats
from trace_testlib import marker_lines, quiet, roundtrip

line_of = marker_lines(pats.__file__)


@pytest.mark.parametrize("fn,marker", pats.CALLS, ids=[m for _, m in pats.CALLS])
def test_size_beside_a_call_follows_eager_or_fails_a_named_guard(fn, marker):
    traced = quiet(tracejit.trace, fn, (torch.ones(2, 3),))
    loaded = roundtrip(traced)
    optimized = quiet(tracejit.optimize_for_inference, traced)
    x = torch.ones(2, 5)
    expected = fn(x)
    assert not torch.equal(expected[:, :3], fn(torch.ones(2, 3)))   # eager's answer moves
    torch.testing.assert_close(quiet(traced, x), expected)   # a re-trace
    torch.testing.assert_close(quiet(optimized, x), expected)
    with pytest.raises(tracejit.GuardError) as err:
        loaded(x)
    assert err.value.source.lineno == line_of(marker)
    torch.testing.assert_close(loaded(torch.full((2, 3), 2.0)), fn(torch.full((2, 3), 2.0)))


def test_calls_that_give_tensors_or_ints_keep_the_size_recorded():
    traced = quiet(tracejit.trace, pats.tensor_calls, (torch.randn(2, 3),))
    loaded = roundtrip(traced)
    for n in (5, 8):
        x = torch.randn(2, n)
        torch.testing.assert_close(loaded(x), pats.tensor_calls(x))   # no GuardError
    assert not [n for n in traced.graph.nodes if n.op == "tracejit::guard" and n.attrs["kind"] == "size"]


def test_torch_jit_trace_freezes_the_helper_call():
    """The reference users compare with: torch.jit.trace's sizes are tensors, but a comparison with a call's float
    is a Python bool, frozen (tracejit: a named guard)."""
    with pytest.warns(torch.jit.TracerWarning):
        jitted = torch.jit.trace(pats.call_below, torch.ones(2, 3), check_trace=False)
    x = torch.ones(2, 5)
    assert not torch.equal(jitted(x), pats.call_below(x))
