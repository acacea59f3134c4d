"""A size guard ONNX cannot check at the entry (the size of an intermediate) is checked by the exported model
itself (export/guard_checks.py): on a new size where it holds, onnxruntime gives eager's answer; where it fails,
the run fails with an error naming the guard's source line, never the traced branch's answer.

The mechanism (transformers' Mamba): ``for i in range(h.shape[2])`` over a transposed input unrolls the loop
to the traced length; the guard ``size == 16`` is on an intermediate's size, so no input dim was pinned and the
dynamic model ran 16 steps for any length (a summed scan: a wrong number, no error). torch.jit.trace, side by
side, answers that wrong number too."""
from __future__ import annotations

import warnings

import onnxruntime as ort
import pytest
import torch

import tracejit
from tracejit.export.static_shapes import with_input_sizes

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class SummedScan(torch.nn.Module):
    def forward(self, x):   # x: [B, L, C]
        h = x.transpose(1, 2) * 2   # an intermediate: its size(2) is no input's
        s = torch.zeros_like(h[:, :, 0])
        for i in range(h.shape[2]):   # SCAN_LINE
            s = s * 0.5 + h[:, :, i]
        return s   # the scan's last state: no broadcast against the length to fail on


class StackedScan(torch.nn.Module):
    """Mamba's form: the stacked steps plus a skip term of the true length."""
    def forward(self, x):
        h = x.transpose(1, 2) * 2
        s = torch.zeros_like(h[:, :, 0])
        steps = []
        for i in range(h.shape[2]):   # STACKED_LINE
            s = s * 0.5 + h[:, :, i]
            steps.append(s)
        return torch.stack(steps, -1) + h, h.sum()   # a 0-d output too


class LongEnough(torch.nn.Module):
    def forward(self, x):
        h = x.flatten(1)
        if h.shape[1] > 8:   # LONG_LINE
            return h.relu()
        return h


class HalvedRows(torch.nn.Module):
    """HF MobileViT's ``torch_int(size)``: int() of an intermediate's size pins it; the reshape gets a number."""
    def forward(self, x):
        y = x.flatten(1)
        k = int(y.shape[1])   # INT_LINE
        return y.reshape(-1, k // 2)   # at another k: a valid reshape to another shape than eager's


def line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if f"# {marker}" in line and "line_of" not in line)


def export(module, example):
    with torch.no_grad():
        traced = tracejit.trace(module, example)
    return traced, tracejit.export_onnx(traced)


def run(proto, x):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return [torch.from_numpy(o) for o in session.run(None, {session.get_inputs()[0].name: x.numpy()})]


def jit_answer(module, example, x):
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        return torch.jit.trace(module, example, check_trace=False)(x)


def test_an_unrolled_scan_refuses_another_length_naming_the_line_instead_of_a_wrong_answer():
    module, example = SummedScan(), torch.randn(2, 16, 4)
    _, proto = export(module, example)
    for x in (torch.randn(3, 16, 4), torch.randn(1, 16, 5)):   # new batch and channels: the same length holds
        torch.testing.assert_close(run(proto, x)[0], module(x))
    longer = torch.randn(2, 24, 4)
    assert not torch.allclose(jit_answer(module, example, longer), module(longer))   # torch.jit: silently wrong
    with pytest.raises(Exception, match=rf"tracejit_guard_\d+_failed_at_\S*test_guard_checks.py:{line_of('SCAN_LINE')}"):
        run(proto, longer)
    meta = {p.key: p.value for p in proto.metadata_props}
    assert f"test_guard_checks.py:{line_of('SCAN_LINE')}" in meta["tracejit.checked_guards"]
    assert "tracejit.unchecked_guards" not in meta


def test_the_check_runs_before_the_nodes_that_rely_on_it():
    """The stacked steps (16) meet the skip term (24): the check fails first, not that broadcast."""
    module, example = StackedScan(), torch.randn(2, 16, 4)
    _, proto = export(module, example)
    x = torch.randn(3, 16, 6)
    for got, want in zip(run(proto, x), module(x)):
        torch.testing.assert_close(got, want)
        assert got.shape == want.shape
    with pytest.raises(Exception, match=rf"tracejit_guard_\d+_failed_at_\S*:{line_of('STACKED_LINE')}"):
        run(proto, torch.randn(2, 24, 4))


def test_an_inequality_on_an_intermediate_size_holds_for_other_sizes_and_fails_clearly():
    module, example = LongEnough(), torch.randn(2, 3, 4)
    _, proto = export(module, example)
    for x in (torch.randn(5, 3, 4), torch.randn(2, 7, 2)):   # 12 and 14 > 8: the traced branch is eager's
        torch.testing.assert_close(run(proto, x)[0], module(x))
    small = torch.randn(2, 2, 3)   # 6: eager takes the other branch
    assert not torch.allclose(jit_answer(module, example, small), module(small))
    with pytest.raises(Exception, match=rf"failed_at_\S*test_guard_checks.py:{line_of('LONG_LINE')}"):
        run(proto, small)


def test_int_of_an_intermediate_size_refuses_another_size_instead_of_reshaping_wrong():
    module, example = HalvedRows(), torch.randn(2, 2, 4)
    _, proto = export(module, example)
    x = torch.randn(5, 4, 2)   # the same 8 elements a row: eager's answer
    torch.testing.assert_close(run(proto, x)[0], module(x))
    wider = torch.randn(2, 4, 4)   # 16 a row: eager (2, 8); the traced reshape (-1, 4) runs and gives (4, 4)
    assert jit_answer(module, example, wider).shape != module(wider).shape
    with pytest.raises(Exception, match=rf"failed_at_\S*test_guard_checks.py:{line_of('INT_LINE')}"):
        run(proto, wider)


def test_the_checks_fold_away_at_fixed_sizes_and_no_warning_is_given():
    module, example = SummedScan(), torch.randn(2, 16, 4)
    with torch.no_grad():
        traced = tracejit.trace(module, example)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracejit.TracerWarning)
        proto = tracejit.export_onnx(traced)
    assert any(n.name.startswith("tracejit_guard_") for n in proto.graph.node)
    fixed = with_input_sizes(proto, {"x_dim0": 2, "x_dim1": 16, "x_dim2": 4})
    assert not any(n.name.startswith("tracejit_guard_") for n in fixed.graph.node)
    torch.testing.assert_close(run(fixed, example)[0], module(example))


def test_guard_outputs_still_makes_them_outputs_without_checks():
    module, example = SummedScan(), torch.randn(2, 16, 4)
    with torch.no_grad():
        traced = tracejit.trace(module, example)
    proto = tracejit.export_onnx(traced, guard_outputs=True)
    assert not any(n.name.startswith("tracejit_guard_") for n in proto.graph.node)
    out, *guards = run(proto, torch.randn(2, 24, 4))
    assert guards and not all(bool(g) for g in guards)   # the caller sees the failed guard


def test_the_onnxruntime_backend_model_has_no_checks_it_checks_them_before_each_run():
    """The backends check these guards on the call's sizes before each run (backends/onnx_call.py): their models
    are exported with ``check_guards=False`` (no gate reshapes hiding shapes from the runtime), and a failing
    size still never gets the traced branch's answer."""
    module, example = SummedScan().eval(), torch.randn(2, 16, 4)
    with torch.no_grad():
        traced = tracejit.trace(module, example)
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    import onnx
    model = onnx.load_from_string(program._model_bytes)
    assert not any(n.name.startswith("tracejit_guard_") for n in model.graph.node)
    for x in (torch.randn(3, 16, 4), torch.randn(2, 24, 4)):   # the second: the traced program answers (retraced)
        with torch.no_grad():
            torch.testing.assert_close(program(x), module(x))
