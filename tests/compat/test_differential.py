"""Every case of the case tables, under torch.jit.trace and tracejit.trace side by side (see harness.py)."""
from pathlib import Path

import pytest

from harness import compare, eager_moves
from cases_functions import CASES as FUNCTION_CASES
from cases_model_code import CASES as MODEL_CODE_CASES
from cases_modules import CASES as MODULE_CASES
from cases_api import CASES as API_CASES
from cases_issues import CASES as ISSUE_CASES

CASES = FUNCTION_CASES + MODEL_CODE_CASES + MODULE_CASES + API_CASES + ISSUE_CASES


def test_every_deliberate_difference_is_documented():
    text = (Path(__file__).resolve().parents[2] / "docs" / "COMPAT.md").read_text()
    missing = sorted({c.deliberate for c in CASES if c.deliberate and f"`{c.deliberate}`" not in text})
    assert not missing, f"deliberate differences not listed in docs/COMPAT.md: {missing}"
    assert len(CASES) >= 150


def test_case_names_are_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_same_as_torch_jit_trace(case):
    compare(case)


@pytest.mark.parametrize("case", [c for c in CASES if c.moves], ids=str)
def test_new_inputs_move_the_output(case):
    assert eager_moves(case), f"{case.name}: the new inputs give the example's eager output; pick other inputs"
