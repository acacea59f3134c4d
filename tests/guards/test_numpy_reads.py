"""trace/numpy_reads.py: a traced number handed to numpy is guarded, by rule, only in the tracing thread.

The patterns of tests/guards/boundary_numpy_patterns.py run through every stage in test_boundary_patterns.py;
here: numpy functions no pattern names (default-deny), what a guard says, numpy called by a thread that
does not trace while another traces, and the stand-ins gone after tracing.
"""
from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest
import torch

import tracejit
from trace_testlib import quiet, roundtrip

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "threads"))
from threadlib import Meeting, assert_nothing_patched, run_threads  # noqa: E402

# numpy functions of several kinds that no pattern and no list names: each is covered by the rule
UNLISTED = {
    "geomspace": lambda x: x.sum() * float(np.geomspace(1, 8, x.size(0)).sum()),
    "kaiser": lambda x: x * torch.from_numpy(np.kaiser(x.size(0), 5.0)).float(),
    "identity": lambda x: x.sum() * float(np.identity(x.size(0)).trace()),
    "indices": lambda x: x.sum() * float(np.indices((x.size(0), 2)).sum()),
    "linalg.matrix_power": lambda x: x.sum() * float(np.linalg.matrix_power(np.eye(2) * 2, x.size(0))[0, 0]),
    "Generator.integers": lambda x: x + float(np.random.default_rng(1).integers(0, x.size(0) * 100)),
    "ufunc.reduce": lambda x: x.sum() * float(np.add.reduce([x.size(0), 2, 3])),
    "ldexp": lambda x: x.sum() * float(np.ldexp(1.0, x.size(0))),
    "emath.log2": lambda x: x.sum() * float(np.emath.log2(x.size(0))),
    "strings.center": lambda x: x.sum() * len(str(np.strings.center("a", x.size(0)))),
}


def same(a, b) -> bool:
    return a.shape == b.shape and torch.allclose(a, b)


@pytest.mark.parametrize("name", sorted(UNLISTED))
def test_numpy_function_nobody_listed_is_guarded(name):
    fn = UNLISTED[name]
    example, new = torch.randn(3), torch.randn(5)
    try:   # without guards the trace freezes the size: the new input moves eager's answer away from it
        frozen = quiet(tracejit.trace, fn, (example,), check_trace=False, guards=False)(new)
        assert not same(frozen, fn(new))
    except RuntimeError:
        pass   # a frozen shape that no longer fits
    traced = quiet(tracejit.trace, fn, (example,), check_trace=False)
    assert same(traced(new), fn(new))   # live: the guard fails and the retrace answers
    assert len(traced.specializations) == 2
    loaded = roundtrip(quiet(tracejit.trace, fn, (example,), check_trace=False))
    assert same(loaded(example), fn(example))
    with pytest.raises(tracejit.GuardError) as info:
        loaded(new)
    assert (info.value.source.filename, info.value.source.lineno) == (__file__, fn.__code__.co_firstlineno), \
        str(info.value)
    assert "value at trace time" in str(info.value)


def test_guard_names_numpy_and_the_user_line():
    def fn(x):
        return x * torch.from_numpy(np.hanning(x.size(0))).float()
    traced = quiet(tracejit.trace, fn, (torch.randn(4),), check_trace=False)
    entries = [e for e in traced.ledger if e.kind == "size"]
    assert any("numpy.hanning()" in e.message for e in entries), [e.message for e in entries]
    assert entries and all(e.lineno == fn.__code__.co_firstlineno + 1 for e in entries), entries


def test_outside_tracing_ufuncs_on_traced_numbers_give_numpy_answers():
    """A TracedInt kept past the trace (a closure) still works with numpy: no tracer, nothing guarded."""
    from tracejit.trace.symbolic import TracedInt
    from tracejit.trace.provenance import TracedFloat
    n, f = TracedInt(9), TracedFloat(2.25)
    assert np.sqrt(n) == 3.0 and np.sqrt(f) == 1.5 and (np.ones(2) * n).tolist() == [9.0, 9.0]
    assert np.arange(n).size == 9


def test_a_thread_that_does_not_trace_calls_numpy_itself_meanwhile():
    """While one thread traces (the stand-ins are installed), another gets numpy's own answers and adds
    nothing to the trace; afterwards every numpy function is the original again."""
    meeting, bystander_done, seen = Meeting(["tracer", "bystander"]), threading.Event(), {}

    def fn(x):
        assert meeting.arrive("tracer") and bystander_done.wait(10)
        return x * float(np.arange(x.size(0)).sum())

    def tracer():
        seen["traced"] = quiet(tracejit.trace, fn, (torch.randn(4),), check_trace=False)

    def bystander():
        assert meeting.arrive("bystander")
        seen["zeros_patched"] = np.zeros is not ORIGINAL_ZEROS
        seen["answers"] = (np.zeros((2, 3)).shape, float(np.linspace(0, 1, 5).sum()), float(np.sqrt(16)))
        bystander_done.set()

    run_threads(tracer, bystander)
    assert seen["zeros_patched"]   # the stand-ins were in place while the bystander ran
    assert seen["answers"] == ((2, 3), 2.5, 4.0)
    traced = seen["traced"]
    sizes = [e for e in traced.ledger if e.kind == "size"]
    assert len(sizes) == 1 and sizes[0].lineno == fn.__code__.co_firstlineno + 2, traced.ledger
    new = torch.randn(6)
    assert same(traced(new), new * 15.0)
    assert_nothing_patched()
    assert np.zeros is ORIGINAL_ZEROS


ORIGINAL_ZEROS = np.zeros


def test_a_numpy_method_in_code_without_a_file_is_guarded():
    """A notebook cell or a function compiled from text ('<...>' file, source in linecache): the numpy method's
    receiver reached through a subscript still has its traced size guarded (found by the long grammar run)."""
    import linecache
    source = "def cell(x):\n    return x * float([np.ones(12)][0].reshape(-1, 2 + x.size(0) % 2).shape[1])\n"
    linecache.cache["<notebook-cell-7>"] = (len(source), None, source.splitlines(True), "<notebook-cell-7>")
    scope = {"np": np}
    exec(compile(source, "<notebook-cell-7>", "exec"), scope)   # noqa: S102  (the test's own text)
    cell = scope["cell"]
    x, y = torch.ones(1), torch.ones(2)
    assert not torch.equal(cell(y), tracejit.trace(cell, (x,), check_trace=False, guards=False)(y))
    traced = quiet(tracejit.trace, cell, (x,), check_trace=False)
    loaded = roundtrip(traced)
    assert torch.equal(quiet(traced, y), cell(y))
    with pytest.raises(tracejit.GuardError) as err:
        loaded(y)
    assert err.value.source.filename == "<notebook-cell-7>" and err.value.source.lineno == 2
