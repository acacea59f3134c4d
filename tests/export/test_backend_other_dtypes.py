"""A call to an onnxruntime / OpenVINO program with another dtype or rank than the trace's
(backends/onnx_call.TracedCall._after_failure).

The exported model takes the traced dtypes and ranks only; eager computes in the call's. Such a call is the traced
program's, as a failed size guard is: its guards decide (a live object traces again where one fails, a loaded one
raises the GuardError), and its recorded ops compute in the call's dtype: eager's answer, where the runtime failed
with "Unexpected input data type".
"""
from __future__ import annotations

import pytest
import torch

import tracejit

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")
BACKENDS = ["onnxruntime", "openvino"]


def scale_rows(x, w):
    return (x * 2 + 1).softmax(-1) @ w


@pytest.mark.parametrize("backend", BACKENDS)
def test_another_dtype_or_rank_is_the_traced_programs_call(backend):
    pytest.importorskip(backend)
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    traced = tracejit.trace(scale_rows, (x, w), check_trace=False)
    fresh = tracejit.trace(scale_rows, (x, w), check_trace=False)
    fresh.drop_original()
    program = tracejit.optimize_for_inference(traced, backend=backend)
    dropped = tracejit.optimize_for_inference(fresh, backend=backend)
    y = torch.randn(5, 4)
    torch.testing.assert_close(program(y, w), scale_rows(y, w))   # the model's own call, a new batch
    assert program.handed_over == 0
    others = [(y.double(), w.double()),               # another dtype: eager answers in float64
              (torch.randn(2, 5, 4), w)]              # another rank: batched matmul
    for args in others:
        want = scale_rows(*args)
        got = program(*args)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(dropped(*args), want)   # the traced program's ops run in the call's dtype
    assert program.handed_over == len(others)
    with pytest.raises(TypeError, match="should be a Tensor"):   # not a tensor: still the clear error
        program([1.0] * 4, w)


def four_rows(x):
    if x.size(0) == 4:  # @four_rows
        return x * 2
    return x - 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pinned_size_is_checked_by_the_traced_programs_guard(backend):
    """``x.size(0) == 4`` fixes the model's first axis: another size was the runtime's 'invalid dimensions' error;
    now the traced program's guard decides (live: traced again, eager's answer; dropped: the GuardError naming
    the line)."""
    pytest.importorskip(backend)
    x = torch.randn(4, 3)
    program = tracejit.optimize_for_inference(tracejit.trace(four_rows, (x,), check_trace=False), backend=backend)
    fresh = tracejit.trace(four_rows, (x,), check_trace=False)
    fresh.drop_original()
    dropped = tracejit.optimize_for_inference(fresh, backend=backend)
    y = torch.randn(4, 7)   # the free axis: the model's own call
    torch.testing.assert_close(program(y), y * 2)
    z = torch.randn(5, 3)
    torch.testing.assert_close(program(z), z - 1)
    with pytest.raises(tracejit.GuardError) as info:
        dropped(z)
    assert info.value.source.lineno == four_rows.__code__.co_firstlineno + 1


class Lookup(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        return self.emb(ids).sum(-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_run_raises_eagers_exception(backend):
    """Ids out of eager's range (export/index_checks.py): past the end, onnxruntime's Gather failed with its own
    message and OpenVINO answered a row of zeros; a negative id picked a row from the end in both. Now the call goes
    to the traced program, which raises eager's IndexError (the class a caller catches)."""
    pytest.importorskip(backend)
    model = Lookup().eval()
    program = tracejit.optimize_for_inference(tracejit.trace(model, (torch.tensor([[1, 2, 3]]),)), backend=backend)
    ids = torch.tensor([[4, 5, 9, 0]])
    with torch.no_grad():
        torch.testing.assert_close(program(ids), model(ids))
        for bad in (torch.tensor([[12]]), torch.tensor([[-1]]), torch.tensor([[3, -10, 4]]), torch.tensor([[10]])):
            with pytest.raises(IndexError):
                model(bad)
            with pytest.raises(IndexError):
                program(bad)


def test_a_standalone_file_has_no_index_check_and_modes_are_checked():
    traced = tracejit.trace(Lookup().eval(), (torch.tensor([[1, 2, 3]]),))
    ops = [n.op_type for n in tracejit.export_onnx(traced).graph.node]
    assert "Where" not in ops and "ReduceMin" not in ops   # the default: the file is the traced program's ops
    with pytest.raises(ValueError, match="index_checks must be None, 'raise' or 'report'"):
        tracejit.export_onnx(traced, index_checks="always")


class Picks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(6, 4))

    def forward(self, rows, cols):
        picked = self.table[rows]                                          # [-6, 6)
        selected = torch.index_select(self.table, 0, cols)                # [0, 6)
        gathered = torch.gather(self.table, 1, cols[:, None] % 4 - (cols[:, None] < 0).long() * 5)   # [0, 4)
        return picked.sum(-1), selected.sum(-1), gathered.sum(-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_select_gather_and_indexing_keep_eagers_range(backend):
    """index_select / gather take [0, n), ``x[i]`` takes [-n, n): in range the answer is eager's (negative rows
    too), out of range eager's IndexError, where a runtime wrapped the index or answered zeros."""
    pytest.importorskip(backend)
    model = Picks().eval()
    program = tracejit.optimize_for_inference(
        tracejit.trace(model, (torch.tensor([1, 2]), torch.tensor([0, 3]))), backend=backend)
    with torch.no_grad():
        for rows, cols in [(torch.tensor([5, -6, 0]), torch.tensor([5, 0, 2])), (torch.tensor([-1]), torch.tensor([4]))]:
            for g, w in zip(program(rows, cols), model(rows, cols)):
                torch.testing.assert_close(g, w)
        for rows, cols in [(torch.tensor([6, 1]), torch.tensor([0, 1])), (torch.tensor([-7, 1]), torch.tensor([0, 1])),
                           (torch.tensor([1, 1]), torch.tensor([6, 1])), (torch.tensor([1, 1]), torch.tensor([-1, 1]))]:
            with pytest.raises((IndexError, RuntimeError)) as eager:
                model(rows, cols)
            with pytest.raises(type(eager.value)):
                program(rows, cols)
