"""``optimize_for_inference(traced, backend="auto")`` on a forward that writes module state (auto_backend.py).

auto calls each candidate on the example inputs (its check) and then many times (its timing). A forward that writes a
buffer (``self.count += 1``) had every one of those calls reach the caller's module (the traced candidate shares its
buffers), and the frozen candidate's own copy moved on with each timed call; each candidate's check also started from
another state than the expected answer's, so every candidate was left out ("no candidate could be built"). Now the
caller's buffers are put back after each call auto makes, and a chosen program holding its own copy is built again
after the measurement: the program's answers are eager's, call after call, and the module is as it was.
"""
from __future__ import annotations

import pytest
import torch

import tracejit

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count += 1
        return self.lin(x) * self.count


@pytest.mark.parametrize("candidates", [("traced", "torch"), ("torch",), ("traced",)])
def test_auto_leaves_the_module_as_it_was_and_answers_as_eager(candidates):
    torch.manual_seed(0)
    model = Counter().eval()
    traced = tracejit.trace(model, (torch.randn(2, 4),), check_trace=False)
    before = model.count.clone()
    program = tracejit.optimize_for_inference(traced, backend="auto", candidates=candidates, budget_s=0.2)
    assert torch.equal(model.count, before)   # auto's own calls left no trace in the module
    reference = Counter().eval()
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        for n in (2, 3, 5):
            x = torch.randn(n, 4)
            torch.testing.assert_close(program(x), reference(x))   # count 2, 3, 4: eager's sequence


def test_a_forward_without_writes_sees_no_write():
    """Where no call writes a buffer, auto writes none either (no version of the caller's buffers moves)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).eval()
    traced = tracejit.trace(model, (torch.randn(3, 4),), check_trace=False)
    versions = [b._version for b in model.buffers()]
    tracejit.optimize_for_inference(traced, backend="auto", candidates=("traced", "torch"), budget_s=0.2)
    assert [b._version for b in model.buffers()] == versions
