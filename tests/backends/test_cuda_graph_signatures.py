"""What a CUDA-graph signature decides beyond shapes (backends/cuda_graphs.py): the guards on Python state (a config
attribute, a module global: their answers per specialization are in the signature) and the metadata every plain
dense tensor has (``layout``, ``is_nested``, ``is_quantized``, ``is_conj``), proved on the CPU with
tests/backends/test_cuda_graphs.py's ``ReplayOnCpu`` (a replay runs no Python: no guard runs again).

Real models hold such guards everywhere (transformers' ``self.config.*``, torchvision's ``box_area`` asking
``is_quantized``, PyTorch's attention asking ``is_nested``): before, any of them meant no graph at all."""
from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.backends import cuda_graphs
from tracejit.runtime import specialize

from test_cuda_graphs import ReplayOnCpu, _x

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
from zoo_models import ZOO  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class Mode(nn.Module):
    """A branch on a plain attribute, as a config flag decides one in transformers."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 4)
        self.mode = "gelu"

    def forward(self, x):
        y = self.lin(x)
        return torch.nn.functional.gelu(y) if self.mode == "gelu" else torch.relu(y) * 3


def _mode():
    torch.manual_seed(0)
    return Mode().eval()


def _graphs(traced) -> tracejit.backends.cuda_graphs.CudaGraphProgram:
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracejit.TracerWarning)   # no "every call runs the optimized program"
        return tracejit.optimize_for_inference(traced, backend="cuda_graphs", capturer=ReplayOnCpu)


def test_a_config_attribute_guard_is_replayed_and_its_answer_is_in_the_signature():
    model = _mode()
    traced = tracejit.trace(model, (_x(2),))
    assert any(n.attrs.get("kind") == "global" for n in traced.graph.nodes if n.op == "tracejit::guard")
    program = _graphs(traced)
    assert program.not_captured == ""
    for seed in (3, 4, 5):   # new values, another batch: replays of one graph give eager's answers
        torch.testing.assert_close(program(_x(5, seed)), model(_x(5, seed)))
    assert program.stats["captures"] == 1 and program.stats["replays"] == 3
    model.mode = "relu"   # the attribute changes: never the stale graph's answer
    x = _x(5, 6)
    want = model(x)
    assert not torch.allclose(want, torch.nn.functional.gelu(model.lin(x)))
    torch.testing.assert_close(program(x), want)   # the live object's program traces again: eager's answer
    assert program.stats["replays"] == 3
    model.mode = "gelu"
    torch.testing.assert_close(program(_x(5, 7)), model(_x(5, 7)))
    assert program.stats["replays"] == 4   # the traced state again: the same graph


def test_a_changed_attribute_of_a_program_without_its_original_raises_guard_error():
    model = _mode()
    traced = tracejit.trace(model, (_x(2),))
    traced.drop_original()
    program = _graphs(traced)
    program(_x(3))
    model.mode = "relu"
    with pytest.raises(tracejit.GuardError, match="mode"):
        program(_x(3, 2))
    assert program.stats["replays"] == 1


SCALE = 2.0


def scaled(x):
    return x * SCALE + 1


def test_a_module_global_guard_is_checked_before_every_replay():
    global SCALE
    traced = tracejit.trace(scaled, (_x(2),))
    program = _graphs(traced)
    torch.testing.assert_close(program(_x(4, 2)), _x(4, 2) * 2 + 1)
    torch.testing.assert_close(program(_x(4, 3)), _x(4, 3) * 2 + 1)
    assert program.stats["replays"] == 2
    SCALE = 5.0
    try:
        torch.testing.assert_close(program(_x(4, 4)), _x(4, 4) * 5 + 1)   # not the graph's x * 2 + 1
    finally:
        SCALE = 2.0
    assert program.stats["replays"] == 2


def test_a_specialization_added_after_the_build_reads_the_guards_again():
    """The optimized program's set of specializations changes (``SpecializationSet.add`` publishes a new tuple): the
    guards are read again, one state check per specialization, and the graphs keyed on the old set's answers are
    dropped (each signature is captured again)."""
    model = _mode()
    program = _graphs(tracejit.trace(model, (_x(2),)))
    program(_x(3))
    program(_x(3, 2))
    assert program.stats["captures"] == 1 and len(program._keyed[3]) == 1
    spec_set = specialize.sets_of(program.program)["forward"]
    before = program._keyed
    spec_set.add(specialize.Specialization("forward", spec_set.first.fn, "a test's copy of the first"))
    torch.testing.assert_close(program(_x(3, 3)), model(_x(3, 3)))
    assert program._keyed[0] == before[0] + 1 and program._keyed[1] is spec_set.entries
    assert len(program._keyed[3]) == 2 and program.stats["captures"] == 2   # one check each; captured again
    torch.testing.assert_close(program(_x(3, 4)), model(_x(3, 4)))
    assert program.stats["captures"] == 2 and program.stats["replays"] == 4
    model.mode = "relu"   # both specializations' checks fail: the program's guards decide (eager's answer)
    torch.testing.assert_close(program(_x(3, 5)), model(_x(3, 5)))
    assert program.stats["replays"] == 4


def dense_facts(x):
    y = x.exp()
    if y.is_nested or y.layout != torch.strided or y.is_quantized or x.is_conj():
        return y
    return y + 1


def test_dense_tensor_metadata_guards_are_decided_by_plain_inputs():
    traced = tracejit.trace(dense_facts, (_x(2),))
    assert {n.attrs.get("call") for n in traced.graph.nodes if n.attrs.get("kind") == "meta"} >= \
        {"attr:is_nested", "attr:layout", "attr:is_quantized", "method:is_conj"}
    program = _graphs(traced)
    assert program.not_captured == ""
    for seed in (2, 3):
        torch.testing.assert_close(program(_x(3, seed)), _x(3, seed).exp() + 1)
    assert program.stats["replays"] == 2


def conj_branch(x):
    if x.is_conj():
        return x.real * 2
    return x.imag + 1


def test_an_input_that_is_not_a_plain_dense_tensor_runs_the_program():
    example = torch.randn(3, dtype=torch.cfloat, generator=torch.Generator().manual_seed(0))
    traced = tracejit.trace(conj_branch, (example,))
    program = _graphs(traced)
    program(example)
    conj = torch.randn(3, dtype=torch.cfloat, generator=torch.Generator().manual_seed(1)).conj()
    assert conj.is_conj()
    torch.testing.assert_close(program(conj), conj_branch(conj))   # eager's branch, not the graph's
    assert program.stats["replays"] == 1 and program.stats["program_runs"] == 1


def strided(x):
    if x.is_contiguous():
        return x + 1
    return x - 1


def test_a_stride_guard_still_means_no_graph():
    """The static input buffers are contiguous copies: a guard on strides is not decided by the signature."""
    traced = tracejit.trace(strided, (_x(2),))
    with pytest.warns(tracejit.TracerWarning, match="meta guard .* is not decided by the input shapes"):
        program = tracejit.optimize_for_inference(traced, backend="cuda_graphs", capturer=ReplayOnCpu)
    torch.testing.assert_close(program(_x(4, 2).t()), _x(4, 2).t() - 1)
    assert program.stats["replays"] == 0


@pytest.mark.parametrize("name", ["bert", "vit_tv"])
def test_zoo_models_with_such_guards_replay_eagers_answers(name):
    """A transformers encoder (its config attributes are global guards) and torchvision's ViT (attention asks
    ``is_nested``): captured once, replayed with eager's answers on new values; before, neither was captured."""
    try:
        model, make = ZOO[name]()
    except RuntimeError as e:   # torchvision is not installed
        pytest.skip(str(e))
    with torch.no_grad():
        traced = tracejit.trace(model, make(1), check_trace=False)
        program = _graphs(traced)
        assert program.not_captured == ""
        for new in (False, True, False):
            args = make(1, new=new)
            torch.testing.assert_close(program(*args), model(*args))
    assert program.stats["failed_captures"] == 0 and program.stats["replays"] == 3, program.stats


def test_a_program_found_writing_its_input_stays_without_graphs_when_its_guards_are_read_again():
    def scale_in_place(x):
        x.mul_(2)
        return x + 1
    program = tracejit.optimize_for_inference(tracejit.trace(scale_in_place, (torch.ones(3),)),
                                              backend="cuda_graphs", capturer=ReplayOnCpu)
    program(torch.ones(2))
    assert "writes one of its inputs" in program.not_captured
    spec_set = specialize.sets_of(program.program)["forward"]
    spec_set.add(specialize.Specialization("forward", spec_set.first.fn, "a test's copy of the first"))
    x = torch.arange(4.0)
    torch.testing.assert_close(program(x), torch.arange(4.0) * 2 + 1)
    torch.testing.assert_close(x, torch.arange(4.0) * 2)   # the caller's tensor written, as eager does
    assert "writes one of its inputs" in program.not_captured and program.stats["replays"] == 0


def test_a_key_made_before_the_guards_were_read_again_captures_nothing():
    """A call whose key was made from the old reading (another thread refreshed meanwhile) runs the program."""
    model = _mode()
    program = _graphs(tracejit.trace(model, (_x(2),)))
    x = _x(3)
    stale = program.call_key((x,), ("tensors", 1))
    spec_set = specialize.sets_of(program.program)["forward"]
    spec_set.add(specialize.Specialization("forward", spec_set.first.fn, "a test's copy of the first"))
    program._fresh()
    assert stale[0] != program._keyed[0]
    with program._lock:
        assert program._capture(stale, (x,), ("tensors", 1)) is cuda_graphs._UNCAPTURED
    assert program.signatures == 0 and program.stats["captures"] == 0
    torch.testing.assert_close(program(x), model(x))   # a fresh key: captured and replayed
    assert program.signatures == 1
