"""Every guard pattern, traced once and called on new inputs.

- in memory: the traced object gives eager's answer on every new input (it retraces a
  specialization where a guard fails);
- loaded from a file: eager's answer, or GuardError naming the user's marked source line;
- the new inputs matter: with guards=False some new input gives another answer than eager
  (or fails), so the guard is what makes the difference;
- side by side with torch.jit.trace: it returns the stale answer where ``jit_stale``.
"""
from __future__ import annotations

import inspect

import pytest
import torch

import tracejit
import size_math_patterns
from patterns import CASES as BASE_CASES, Case
from trace_testlib import marker_lines, quiet, roundtrip

CASES = BASE_CASES + size_math_patterns.CASES


def file_of(case: Case) -> str:
    return inspect.getsourcefile(case.fn)


def line_of(case: Case) -> int:
    return marker_lines(file_of(case))(case.name)


def build(case: Case):
    if isinstance(case.fn, type):
        torch.manual_seed(0)
        return case.fn().eval()
    return case.fn


def same(a, b, tol) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_traced_equals_eager_on_new_inputs(case):
    fn = build(case)
    traced = quiet(tracejit.trace, fn, case.example, check_trace=False)
    for inputs in [case.example] + case.new:
        expected = fn(*inputs)
        got = quiet(traced, *inputs)
        assert same(got, expected, case.tol), (case.name, [tuple(i.shape) for i in inputs])
    if case.guard_fails:
        assert len(traced.specializations) >= 2, "no new input made a guard fail"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_loaded_gives_eager_answer_or_guard_error_at_the_line(case):
    fn = build(case)
    loaded = roundtrip(quiet(tracejit.trace, fn, case.example, check_trace=False))
    failures = 0
    for inputs in case.new:
        expected = fn(*inputs)
        try:
            got = loaded(*inputs)
        except tracejit.GuardError as e:
            failures += 1
            assert isinstance(e, RuntimeError)
            assert e.source is not None and e.source.filename == file_of(case), str(e)
            assert e.source.lineno == line_of(case), str(e)
            assert f"patterns.py:{line_of(case)}" in str(e)
            assert "value at trace time" in str(e) and "value now" in str(e)
            continue
        assert same(got, expected, case.tol), (case.name, [tuple(i.shape) for i in inputs])
    assert (failures > 0) == case.guard_fails


@pytest.mark.parametrize("case", [c for c in CASES if c.guard_fails], ids=lambda c: c.name)
def test_without_guards_some_new_input_is_answered_wrongly(case):
    """guards=False is the old behaviour: proves the new inputs move the outcome."""
    fn = build(case)
    traced = quiet(tracejit.trace, fn, case.example, check_trace=False, guards=False)
    wrong = 0
    for inputs in case.new:
        try:
            got = traced(*inputs)
        except Exception:  # noqa: BLE001  (a stale trace may also fail deep inside an op)
            wrong += 1
            continue
        wrong += not same(got, fn(*inputs), case.tol)
    assert wrong > 0


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_torch_jit_trace_side_by_side(case):
    """torch.jit.trace keeps the example's answer (documented in docs/DESIGN.md, Guards)."""
    fn = build(case)
    jitted = quiet(torch.jit.trace, fn, case.example, check_trace=False)
    traced = quiet(tracejit.trace, fn, case.example, check_trace=False)
    jit_wrong = 0
    for inputs in case.new:
        expected = fn(*inputs)
        try:
            jit_wrong += not same(quiet(jitted, *inputs), expected, case.tol)
        except Exception:  # noqa: BLE001
            jit_wrong += 1
        assert same(quiet(traced, *inputs), expected, case.tol)
    assert (jit_wrong > 0) == case.jit_stale
