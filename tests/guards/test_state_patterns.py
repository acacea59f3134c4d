"""Python state, randomness, clocks and caught exceptions in forward (issue 20, item 2).

For every pattern of state_patterns.py: eager's answer after the trace differs from the frozen
trace-time outcome, which torch.jit.trace silently returns (so the pattern matters); tracejit
refuses it at trace time with a TraceError naming the marked line and the opt-out; with
``allow_frozen_python_state=True`` it traces, warns (TracerWarning at that line) and writes a
``python_state`` ledger entry.
"""
from __future__ import annotations

import inspect
import logging
import random
import threading
import time
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import tracejit
import state_patterns
from state_patterns import CASES, StateCase
from trace_testlib import marker_lines

LINE = marker_lines(inspect.getsourcefile(state_patterns))
FILE = inspect.getsourcefile(state_patterns)


def fresh(case: StateCase):
    torch.manual_seed(0)
    return case.make()


def reseed(case: StateCase, k: int) -> None:
    if case.reseed is not None:
        case.reseed(k)


def observed(case: StateCase, model, out):
    return case.observe(model, out) if case.observe is not None else out


def differ(a, b) -> bool:
    return a.shape != b.shape or not torch.allclose(a.float(), b.float())


def eager_then(case: StateCase):
    model = fresh(case)
    reseed(case, 0)
    model(*case.example)
    reseed(case, 1)
    return observed(case, model, model(*case.then))


def frozen_then(case: StateCase):
    """torch.jit.trace's answer after the trace (where torch.jit.trace crashes on the pattern or its program
    raises, the answer of tracejit's opt-out program, which freezes the same trace-time outcome)."""
    model = fresh(case)
    reseed(case, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if case.jit_unusable:
            jit = tracejit.trace(model, case.example, check_trace=False, allow_frozen_python_state=True)
        else:
            jit = torch.jit.trace(model, case.example, check_trace=False)
    reseed(case, 1)
    return observed(case, model, jit(*case.then))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_eager_moves_and_torch_jit_trace_silently_freezes(case):
    assert differ(eager_then(case), frozen_then(case)), "the frozen outcome must differ from eager's"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_tracing_refuses_naming_the_line_and_the_way_out(case):
    reseed(case, 0)
    with pytest.raises(tracejit.TraceError) as err:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tracejit.trace(fresh(case), case.example)
    text = str(err.value)
    assert f"{FILE}:{LINE(case.name)}:" in text, text
    assert "allow_frozen_python_state=True" in text


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_opt_out_traces_warns_at_the_line_and_writes_the_ledger(case):
    reseed(case, 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = tracejit.trace(fresh(case), case.example, allow_frozen_python_state=True, check_trace=False)
    lines = [(w.filename, w.lineno) for w in caught if issubclass(w.category, tracejit.TracerWarning)
             and "allow_frozen_python_state" in str(w.message)]
    assert (FILE, LINE(case.name)) in lines, lines
    entries = [e for e in traced.ledger if e.kind == "python_state"]
    assert entries and any(e.lineno == LINE(case.name) for e in entries)


def test_trace_module_takes_the_opt_out_and_a_retrace_keeps_it():
    model = state_patterns.SampleCount()
    with pytest.raises(tracejit.TraceError, match="self.count"):
        tracejit.trace_module(model, {"forward": (torch.randn(2, 4),)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace_module(model, {"forward": (torch.randn(2, 4),)}, allow_frozen_python_state=True,
                                       check_trace=False)
        traced.train(False)
        traced(torch.randn(2, 4))   # a training-flag retrace records again, with the same opt-out


class Harmless(nn.Module):
    """What forward may do: update buffers in place, switch a mode and switch it back, read state, move a list
    of tensors (torchvision's anchors), set up a None attribute on the first call (MultiScaleRoIAlign)."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.1)
        self.register_buffer("steps", torch.zeros(()))
        self.table = [1.0, 2.0]
        self.anchors = [torch.ones(4)]
        self.scale = None

    def forward(self, x):
        self.steps.add_(1)
        self.anchors = [a.to(dtype=x.dtype) for a in self.anchors]
        if self.scale is None:
            self.scale = 0.5
        was = self.drop.training
        self.drop.eval()
        y = self.drop(self.bn(x)) * self.table[0] * self.scale + self.anchors[0]
        self.drop.train(was)
        return y


def test_in_place_buffer_updates_and_restored_modes_are_not_refused():
    traced = tracejit.trace(Harmless(), (torch.randn(3, 4),), check_trace=False)
    notes = [e.message for e in traced.ledger if e.kind == "python_state"]
    assert len(notes) == 1 and "`scale`" in notes[0] and "lazy set-up" in notes[0], notes


def test_torch_layers_and_a_transformers_model_trace_without_refusal():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 50, (2, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (ids,), strict=False)
    assert not [e for e in traced.ledger if e.kind == "python_state"]
    lstm = nn.LSTM(4, 4, batch_first=True).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracejit.trace(lstm, (torch.randn(2, 3, 4),))


def test_the_stand_ins_act_only_in_the_tracing_thread_and_are_gone_after():
    originals = (random.random, time.time, np.random.rand, torch.manual_seed)
    seen = {}

    def other():
        seen["draw"] = random.random()
        seen["clock"] = time.time()

    def body(x):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        return x * 2

    tracejit.trace(body, (torch.randn(3),))   # the other thread's draw and clock read are not this trace's
    assert "draw" in seen and "clock" in seen
    assert (random.random, time.time, np.random.rand, torch.manual_seed) == originals


class ScaleFromShape(nn.Module):
    """torchvision's MultiScaleRoIAlign in small: on the first call, a scale is inferred from the input's size
    (``2 ** round(log2(feature / image))``, a Python float from traced sizes) and kept; later calls reuse it."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(4)
        self.scale = None

    def forward(self, x):
        f = self.pool(x)
        if self.scale is None:
            self.scale = 2 ** float(torch.tensor(f.shape[-1] / x.shape[-1]).log2().round())
        return f * self.scale


def test_a_lazy_set_up_from_the_input_size_passes_the_default_trace_check():
    """The checker's retrace starts from the state before the lazy set-up, as the trace did (it used to retrace
    the cached path and raise TracingCheckError, where torch.jit.trace passes); the attribute keeps the first
    call's value, as in eager."""
    model = ScaleFromShape()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (torch.randn(2, 3, 16, 16),))   # check_trace on, the default
    assert model.scale == 0.25
    x = torch.randn(3, 3, 24, 32)
    torch.testing.assert_close(traced(x), ScaleFromShape()(x))
    torch.testing.assert_close(traced(x), model(x))


class HandsTensorDown(nn.Module):
    """A parent hands a tensor to its child through an attribute the child reads in the same call (not carried:
    trace/carried_state.py looks only at the code that stores it)."""

    class Child(nn.Module):
        def __init__(self):
            super().__init__()
            self.ctx = None

        def forward(self, x):
            return x + self.ctx

    def __init__(self):
        super().__init__()
        self.child = HandsTensorDown.Child()

    def forward(self, x):
        self.child.ctx = x.mean()
        return self.child(x)


def test_set_up_then_read_and_a_tensor_handed_down_are_not_carried_state():
    """``if self.scale is None: self.scale = ...`` then reads, and a tensor set by the parent for its child, trace
    without refusal and answer as eager on new inputs (only reads before the set-up, other than ``is None``, or
    two sets, count as a value carried to the next call)."""
    for model in (ScaleFromShape(), HandsTensorDown()):
        x = torch.randn(2, 3, 16, 16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = tracejit.trace(model, (x,), check_trace=False)
        y = torch.randn(2, 3, 16, 16)
        torch.testing.assert_close(traced(y), model(y))


class LoggedTable(nn.Module):
    """A held logger (its private ``_cache`` fills on the first ``debug``) and a held helper's private cache."""

    def __init__(self):
        super().__init__()
        self.log = logging.getLogger(f"{__name__}.LoggedTable")
        self.table = state_patterns.PositionTable()

    def forward(self, x):
        self.log.debug("width %d", x.shape[-1])
        return x * self.table.counts(x.shape[-1])


def test_a_held_cache_set_up_before_the_trace_and_a_held_logger_trace():
    """hunt26: a held object's private cache is state (refused on the trace that fills it: held_private_cache);
    filled by a call before tracing, the trace reads and updates the cached tensor as eager does. A standard-library
    object's private attributes (a Logger's ``_cache``) are left out."""
    model, twin = LoggedTable(), LoggedTable()
    x = torch.randn(4)
    model(x), twin(x)   # the set-up call
    model.log._cache.clear()
    traced = tracejit.trace(model, (x,), check_trace=False)
    twin(x)
    for _ in range(2):
        new = torch.randn(4)
        torch.testing.assert_close(traced(new), twin(new))
