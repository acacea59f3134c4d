"""The size checks an exported model makes itself (export/guard_checks.py) gate later reads through one running
product of the checks: one Mul per check, however many values are read across how many checks.

RetinaNet at batch 8 (its per-image steps read values computed between many checks) had 541 Muls of such products,
one chain per (first check, last check) pair, of its 1,271 Muls."""
from __future__ import annotations

import onnxruntime as ort
import pytest
import torch

import tracejit

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")

STEPS = 6


class ChecksBetweenSteps(torch.nn.Module):
    """Each step's guard is on an intermediate's size (``flatten``: size math of the input, checked in the graph);
    each step's value is computed after its check and all are read after the last one."""
    def forward(self, x):
        h = x.flatten(1)
        parts = []
        for k in range(STEPS):
            if h.shape[1] > k:   # STEP_LINE
                h = h + k
            parts.append(h * (k + 1))
        return torch.stack(parts).sum(0)


def _export(x):
    with torch.no_grad():
        return tracejit.export_onnx(tracejit.trace(ChecksBetweenSteps(), x))


def _product_muls(proto) -> int:
    """Muls whose operands are both check values or products of them (named tracejit_guard_*, or such Muls)."""
    made_by = {o: n for n in proto.graph.node for o in n.output}
    gates = {n.output[0] for n in proto.graph.node if n.name.startswith("tracejit_guard_")}
    count = 0
    for n in proto.graph.node:   # in order: a product's operands come before it
        if n.op_type == "Mul" and all(i in gates for i in n.input):
            gates.add(n.output[0])
            count += 1
    return count


def test_one_mul_per_check_and_eager_answers_on_new_sizes():
    proto = _export(torch.randn(2, 3, 4))
    checks = sum(n.name.startswith("tracejit_guard_") for n in proto.graph.node)
    assert checks == STEPS
    assert _product_muls(proto) == checks - 1
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in [(3, 2, 5), (1, 4, 2)]:
        x = torch.randn(shape)
        (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        torch.testing.assert_close(torch.from_numpy(got), ChecksBetweenSteps()(x))


def test_a_failed_check_still_fails_the_run():
    proto = _export(torch.randn(2, 3, 4))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="tracejit_guard_"):   # 1x2 = 2 features: the step-2 guard no longer holds
        session.run(None, {session.get_inputs()[0].name: torch.randn(2, 1, 2).numpy()})
