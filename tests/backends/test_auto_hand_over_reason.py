"""auto_backend.py's report says why an exported candidate was left out when the traced program answered for it:
the guard the runtime's run failed (what it required, the traced line) or the runtime's own error, not only that it
happened (Mask R-CNN at batch 8: onnxruntime's run failed on the mask paste's slice, which its note did not say)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class Scaled(nn.Module):
    """Scales by an int read from the data (a value guard the exported model computes as a guard output)."""

    def forward(self, x):
        k = int(x[0, 0].abs() * 4)
        return torch.relu(x) * (k + 1)


def test_a_failed_guard_output_is_named_by_the_program():
    x = torch.full((3, 5), 0.3)
    traced = tracejit.trace(Scaled().eval(), (x,))
    other = torch.full((3, 5), 0.9)   # int(0.9 * 4) = 3, not 1: the traced branch's constant no longer holds
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    with torch.no_grad():
        torch.testing.assert_close(program(other), Scaled()(other))   # the traced program's answer (eager's)
    assert program.handed_over == 1
    assert "guard output was False" in program.hand_over_reason and "test_auto_hand_over_reason.py" in \
        program.hand_over_reason


def test_autos_report_says_why_the_traced_program_answered_for_a_candidate(monkeypatch):
    """A candidate whose runtime fails on the example (as onnxruntime's run on Mask R-CNN at batch 8): auto's note
    names the runtime's error."""
    from tracejit import auto_backend
    real = auto_backend.protocol.build

    def build(name, traced, **options):
        program = real(name, traced, **options)
        if name == "onnxruntime":
            def failing_run(*args, **kwargs):
                try:
                    raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned "
                                       "while running ScatterND node")
                except RuntimeError:
                    return program._after_failure(args, kwargs)
            program._call = failing_run
        return program
    monkeypatch.setattr(auto_backend.protocol, "build", build)
    traced = tracejit.trace(Scaled().eval(), (torch.full((3, 5), 0.3),))
    auto = tracejit.optimize_for_inference(traced, backend="auto", budget_s=0.2, candidates=("traced", "onnxruntime"))
    line = next(ln for ln in auto.report.splitlines() if ln.strip().startswith("onnxruntime:"))
    assert "left out" in line and "RuntimeError: [ONNXRuntimeError]" in line and "ScatterND" in line


def test_a_failed_run_is_named_by_its_error():
    traced = tracejit.trace(Scaled().eval(), (torch.full((3, 5), 0.3),))
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")

    def fail(*a, **k):
        raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : updates tensor should have shape ...")
    program._run_for = lambda tensors: fail
    x = torch.full((3, 5), 0.3)
    with torch.no_grad():
        torch.testing.assert_close(program._call_general(x), Scaled()(x))
    assert program.handed_over == 1 and program.hand_over_reason.startswith("RuntimeError: [ONNXRuntimeError]")
