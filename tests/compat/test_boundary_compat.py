"""The boundary rule's guards and refusals side by side with torch.jit.trace (harness.py, cases_boundary.py).

tracejit gives eager's answer or a GuardError on every new input (compare), and the new inputs move
eager's output; torch.jit.trace returns a stale answer (or fails) on at least one new input of most
cases: that is the difference docs/COMPAT.md lists (`boundary-guards`, `boundary-refusals`).
"""
from pathlib import Path

import pytest

from cases_boundary import CASES
from harness import compare, eager_moves, observe, same_call


@pytest.mark.parametrize("case", CASES, ids=str)
def test_boundary_case_against_torch_jit_trace(case):
    compare(case)


@pytest.mark.parametrize("case", [c for c in CASES if c.moves], ids=str)
def test_boundary_new_inputs_move_the_output(case):
    assert eager_moves(case), case.name


def test_torch_jit_trace_is_stale_where_tracejit_guards():
    stale = 0
    for case in CASES:
        ref, eager = observe(case, "torch"), observe(case, "eager")
        stale += ref.trace_error is not None or any(not same_call(r, e) for r, e in zip(ref.calls, eager.calls))
    assert stale >= 0.8 * len(CASES), f"torch.jit.trace stale in only {stale} of {len(CASES)} cases"


def test_differences_are_documented():
    text = (Path(__file__).resolve().parents[2] / "docs" / "COMPAT.md").read_text()
    assert "`boundary-guards`" in text and "`boundary-refusals`" in text
