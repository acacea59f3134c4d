"""A traced size that meets a non-int operand inside pow / divmod / sum / math.prod is guarded at the line
(trace/float_operands.py): before, the trace's number was kept at every size, live, optimized and loaded
(torch.jit.trace, whose sizes are tensors, records the pow)."""
from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import ExponentialDecayLengthPenalty

import tracejit
import float_operand_patterns as pats
from trace_testlib import marker_lines, quiet, roundtrip

line_of = marker_lines(pats.__file__)


@pytest.mark.parametrize("fn,marker", pats.FUNCTIONS, ids=[m for _, m in pats.FUNCTIONS])
def test_builtin_reads_of_a_size_follow_eager_or_fail_a_named_guard(fn, marker):
    traced = quiet(tracejit.trace, fn, (torch.ones(2, 3),))
    optimized = quiet(tracejit.optimize_for_inference, traced)
    loaded = roundtrip(traced)
    x = torch.ones(2, 5)
    expected = fn(x)
    assert not torch.equal(expected, fn(torch.ones(2, 3))[:, :1].expand(2, 5))   # eager's answer moves
    torch.testing.assert_close(quiet(traced, x), expected)   # a re-trace
    torch.testing.assert_close(quiet(optimized, x), expected)
    with pytest.raises(tracejit.GuardError) as err:
        loaded(x)
    assert err.value.source.lineno == line_of(marker)
    torch.testing.assert_close(loaded(torch.ones(2, 3)), fn(torch.ones(2, 3)))


def test_int_only_sum_stays_recorded():
    traced = quiet(tracejit.trace, pats.int_sum_view, (torch.randn(2, 3),))
    loaded = roundtrip(traced)
    for b in (1, 4, 7):
        x = torch.randn(b, 3)
        torch.testing.assert_close(loaded(x), pats.int_sum_view(x))
    assert traced._specializations.traces == 0


def test_length_penalty_pattern_at_new_lengths():
    m = pats.LengthPenalty().eval()
    scores = torch.randn(2, 10)
    traced = quiet(tracejit.trace, m, (torch.zeros(2, 5, dtype=torch.long), scores))
    loaded = roundtrip(traced)
    for n in (6, 9):
        ids = torch.zeros(2, n, dtype=torch.long)
        torch.testing.assert_close(quiet(traced, ids, scores), m(ids, scores))
        with pytest.raises(tracejit.GuardError) as err:
            loaded(ids, scores)
        assert err.value.source.lineno == line_of("penalty")


def test_transformers_exponential_decay_length_penalty():
    class Proc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = ExponentialDecayLengthPenalty((3, 1.5), eos_token_id=3, input_ids_seq_length=2)

        def forward(self, ids, scores):
            return self.p(ids, scores)

    m = Proc().eval()
    torch.manual_seed(0)
    scores = torch.randn(2, 20)
    traced = quiet(tracejit.trace, m, (torch.zeros(2, 6, dtype=torch.long), scores))
    optimized = quiet(tracejit.optimize_for_inference, traced)
    loaded = roundtrip(traced)
    for n in (9, 7):
        ids = torch.zeros(2, n, dtype=torch.long)
        expected = m(ids, scores)
        assert not torch.equal(expected, m(torch.zeros(2, 6, dtype=torch.long), scores))
        torch.testing.assert_close(quiet(traced, ids, scores), expected)
        torch.testing.assert_close(quiet(optimized, ids, scores), expected)
        with pytest.raises(tracejit.GuardError):
            loaded(ids, scores)


@pytest.mark.parametrize("fn,marker", pats.OPERATORS, ids=[m for _, m in pats.OPERATORS])
def test_operator_with_the_size_on_the_right_follows_eager_or_fails_a_named_guard(fn, marker):
    """``0.5 * n``, ``1.0 / n``, ``3.5 < n``, ``[1.0] * n``, ``True + n``, ``acc *= n``, ``self.scale ** n``: the
    other operand's C arithmetic reads the size; found in the source (trace/operand_scan.py) and guarded."""
    traced = quiet(tracejit.trace, fn, (torch.ones(2, 3),))
    loaded = roundtrip(traced)
    x = torch.ones(2, 5)
    expected = fn(x)
    assert not torch.equal(expected[:, :3], fn(torch.ones(2, 3)))   # eager's answer moves
    torch.testing.assert_close(quiet(traced, x), expected)
    with pytest.raises(tracejit.GuardError) as err:
        loaded(x)
    assert err.value.source.lineno == line_of(marker)


def test_size_on_the_left_stays_recorded():
    traced = quiet(tracejit.trace, pats.size_first, (torch.randn(2, 3),))
    loaded = roundtrip(traced)
    for n in (5, 8, 11):
        x = torch.randn(2, n)
        torch.testing.assert_close(loaded(x), pats.size_first(x))   # no GuardError
    assert not [n for n in traced.graph.nodes if n.op == "tracejit::guard" and n.attrs["kind"] == "size"]
