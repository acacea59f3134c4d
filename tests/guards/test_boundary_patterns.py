"""The boundary patterns (boundary_patterns.py), traced once and called on inputs that take another path.

Each pattern gives eager's answer, or a clear GuardError naming the marked user line:
live (a traced object retraces), after save + load, after optimize_for_inference, and in
onnxruntime where the program exports (else the export is refused with ExportError). First,
with guards=False, some new input gets another answer than eager: the inputs move the output,
and the guard is what makes the difference. Refusals raise BoundaryError naming the line.
"""
from __future__ import annotations

import inspect
import os

import pytest
import torch

import tracejit
from boundary_patterns import CASES, REFUSALS, REPLAYS, Case
from tracejit.trace.boundary import BoundaryError
from trace_testlib import marker_lines, quiet, roundtrip


def file_of(case: Case) -> str:
    fn = case.fn.forward if isinstance(case.fn, type) else case.fn
    return inspect.getsourcefile(fn)


def build(case: Case):
    if isinstance(case.fn, type):
        torch.manual_seed(0)
        return case.fn().eval()
    return case.fn


def trace(case: Case, **kwargs):
    return quiet(tracejit.trace, build(case), case.example, check_trace=False, **kwargs)


def same(a, b, tol) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a.detach(), b.detach(), rtol=tol, atol=tol,
                                                                         equal_nan=True)


def eager(case: Case, fn, inputs):
    return fn(*inputs)


def assert_guard_error_at_line(case: Case, e: tracejit.GuardError) -> None:
    assert "value at trace time" in str(e) or "trace was made with a plain tensor" in str(e), str(e)
    if case.at_line:
        line = marker_lines(file_of(case))(case.name)
        assert e.source is not None and (e.source.filename, e.source.lineno) == (file_of(case), line), str(e)
        assert f"{os.path.basename(file_of(case))}:{line}" in str(e)


def answers_or_guard_error(case: Case, program, fn) -> int:
    """Every new input: eager's answer or GuardError at the line. Returns how many raised."""
    failures = 0
    for inputs in case.new:
        want = eager(case, fn, inputs)
        try:
            got = program(*inputs)
        except tracejit.GuardError as e:
            assert_guard_error_at_line(case, e)
            failures += 1
            continue
        except tracejit.BudgetError as e:   # a loaded program refuses size arithmetic past 64 bits (SECURITY.md)
            assert getattr(fn, "__code__", None) and fn.__code__.co_filename in "".join(getattr(e, "__notes__", [])), e
            failures += 1
            continue
        assert same(got, want, case.tol), (case.name, got, want)
    return failures


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_new_inputs_move_the_answer(case):
    """guards=False freezes the trace's values: some new input then gets a wrong answer (or fails)."""
    fn = build(case)
    traced = trace(case, guards=False)
    assert same(traced(*case.example), fn(*case.example), case.tol)
    wrong = 0
    for inputs in case.new:
        try:
            wrong += not same(quiet(traced, *inputs), fn(*inputs), case.tol)
        except Exception:  # noqa: BLE001  (a stale trace may fail deep inside an op)
            wrong += 1
    assert wrong > 0, case.name


@pytest.mark.parametrize("case", CASES + REPLAYS, ids=lambda c: c.name)
def test_live(case):
    fn = build(case)
    traced = trace(case)
    assert same(traced(*case.example), fn(*case.example), case.tol)
    if not case.at_line:   # an input check: a clear GuardError, no retrace
        assert answers_or_guard_error(case, lambda *a: quiet(traced, *a), fn) > 0
        return
    for inputs in case.new:
        assert same(quiet(traced, *inputs), fn(*inputs), case.tol), case.name
    assert (len(traced.specializations) > 1) == (case not in REPLAYS), case.name


@pytest.mark.parametrize("case", CASES + REPLAYS, ids=lambda c: c.name)
def test_saved_and_loaded(case):
    fn = build(case)
    loaded = roundtrip(trace(case))
    assert same(loaded(*case.example), fn(*case.example), case.tol)
    failures = answers_or_guard_error(case, loaded, fn)
    assert (failures > 0) == (case not in REPLAYS), case.name


@pytest.mark.parametrize("case", CASES + REPLAYS, ids=lambda c: c.name)
def test_optimized_for_inference(case):
    """Live, a call the optimized program's trace does not fit goes to the traced object, which traces
    again (backends/fallback.py hand_over): eager's answer, as test_live's. Once the original is dropped,
    the optimized program's own guards raise the GuardError at the line."""
    fn = build(case)
    with torch.no_grad():
        traced = trace(case)
        program = tracejit.optimize_for_inference(traced)
        assert same(program(*case.example), fn(*case.example), case.tol)
        live = answers_or_guard_error(case, lambda *a: quiet(program, *a), fn)
        fresh = trace(case)   # the traced object alone, called the same way (here under no_grad)
        assert live == answers_or_guard_error(case, lambda *a: quiet(fresh, *a), fn), case.name
        traced.drop_original()
        failures = answers_or_guard_error(case, program, fn)
    assert failures > 0 or case in REPLAYS or case.name in ("requires_grad_checkpoint",), case.name


@pytest.mark.parametrize("case", CASES + REPLAYS, ids=lambda c: c.name)
def test_onnxruntime_answers_or_refuses_export(case):
    pytest.importorskip("onnxruntime")
    fn = build(case)
    traced = trace(case)
    try:
        program = quiet(tracejit.optimize_for_inference, traced, backend="onnxruntime")
    except (tracejit.export.ExportError, tracejit.TraceError, NotImplementedError) as e:
        assert str(e)
        return
    with torch.no_grad():
        for inputs in [case.example] + case.new:
            inputs = tuple(i.detach().contiguous().as_subclass(torch.Tensor) for i in inputs)
            want = fn(*inputs)
            try:
                got = program(*inputs)
            except tracejit.GuardError as e:
                assert_guard_error_at_line(case, e)
                continue
            assert same(got, want, 1e-4), (case.name, got, want)


@pytest.mark.parametrize("case", REFUSALS, ids=lambda c: c.name)
def test_refused_at_trace_time_naming_the_line(case):
    with pytest.raises(BoundaryError) as info:
        trace(case)
    line = marker_lines(file_of(case))(case.name)
    assert f"boundary_patterns.py:{line}" in str(info.value)
    assert isinstance(info.value, tracejit.TraceError)


def test_at_least_sixty_patterns():
    assert len(CASES) + len(REPLAYS) + len(REFUSALS) >= 60
