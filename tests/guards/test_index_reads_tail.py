"""A traced size used as an index where no op is recorded after it in its frame (issue #10).

``pick(n)`` returning ``SCALES[n]`` with no torch op in ``pick``, or a subscript on the last
lines of ``forward``: the subscript runs after the last recorded event of its function.
Each case is traced at one size and called at a NEW size:

- in memory: eager's answer (the guard fails and the traced object retraces);
- saved and loaded: GuardError naming the marked source line of the subscript;
- torch.jit.trace on the same new input differs from eager (why the guard matters);
- the same helpers indexed with a constant add no guard.
"""
from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import tracejit
from trace_testlib import marker_lines, quiet, roundtrip

SCALES = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
BY_SIZE = {1: 0.5, 2: 1.5, 3: 2.5, 4: 3.5, 5: 4.5}


def pick(n):
    return SCALES[n]   # @helper_no_op


def helper_no_op(x):
    s = pick(x.size(0))
    return x * s


def last_line_after_op(x):
    n = x.size(1)
    outs = [x + 1, x * 2, x - 3, x / 4, x * 5]
    return outs[n]   # @last_line_after_op


def lookup(n):
    return BY_SIZE[n]   # @dict_keyed_by_size


def dict_keyed_by_size(x):
    k = x.size(0)
    return x * lookup(k)


def inner(n):
    return SCALES[n]   # @nested_two_levels


def outer(n):
    return inner(n) + 1.0


def nested_two_levels(x):
    return x * outer(x.size(0))


def two_outputs(x):
    n = x.size(0)
    y = x * 2
    return y, SCALES[n]   # @two_outputs


class ModuleForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.gains = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]

    def factor(self, n):
        return self.gains[n]   # @module_forward

    def forward(self, x):
        g = self.factor(x.size(0))
        return self.lin(x) * g


def constant_index(x):
    s = pick(2)
    return x * s


def constant_after_op(x):
    outs = [x + 1, x * 2, x - 3]
    return outs[1]


# (name, callable or module class, example input, new input)
CASES = [
    ("helper_no_op", helper_no_op, torch.randn(2, 3), torch.randn(4, 3)),
    ("last_line_after_op", last_line_after_op, torch.randn(3, 1), torch.randn(3, 3)),
    ("dict_keyed_by_size", dict_keyed_by_size, torch.randn(2, 3), torch.randn(4, 3)),
    ("nested_two_levels", nested_two_levels, torch.randn(2, 3), torch.randn(5, 3)),
    ("two_outputs", two_outputs, torch.randn(2, 3), torch.randn(4, 3)),
    ("module_forward", ModuleForward, torch.randn(2, 3), torch.randn(4, 3)),
]
CONSTANT_CASES = [("constant_index", constant_index), ("constant_after_op", constant_after_op)]

line_of = marker_lines(__file__)


def build(fn):
    if isinstance(fn, type):
        torch.manual_seed(0)
        return fn().eval()
    return fn


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return float(a) == float(b)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and torch.allclose(a, b)


@pytest.mark.parametrize("name,fn,example,new", CASES, ids=[c[0] for c in CASES])
def test_in_memory_trace_gives_eager_answer_at_new_size(name, fn, example, new):
    fn = build(fn)
    traced = quiet(tracejit.trace, fn, example, check_trace=False)
    assert same(quiet(traced, example), fn(example))
    assert same(quiet(traced, new), fn(new)), name
    assert len(traced.specializations) >= 2, "the new size did not fail a guard"


@pytest.mark.parametrize("name,fn,example,new", CASES, ids=[c[0] for c in CASES])
def test_loaded_raises_guard_error_at_the_subscript_line(name, fn, example, new):
    fn = build(fn)
    loaded = roundtrip(quiet(tracejit.trace, fn, example, check_trace=False))
    assert same(loaded(example), fn(example))
    with pytest.raises(tracejit.GuardError) as info:
        loaded(new)
    err = info.value
    assert err.source is not None and err.source.filename == __file__, str(err)
    assert err.source.lineno == line_of(name), str(err)
    assert f"test_index_reads_tail.py:{line_of(name)}" in str(err)


@pytest.mark.parametrize("name,fn,example,new", CASES, ids=[c[0] for c in CASES])
def test_torch_jit_trace_is_stale_there(name, fn, example, new):
    """torch.jit.trace keeps the example's index: its answer at the new size is not eager's
    (a dict keyed by a size gets a tensor key and fails; a float output cannot be traced)."""
    fn = build(fn)
    try:
        jitted = quiet(torch.jit.trace, fn, example, check_trace=False)
        got = quiet(jitted, new)
    except (RuntimeError, KeyError):
        return
    assert not same(got, fn(new))


@pytest.mark.parametrize("name,fn", CONSTANT_CASES, ids=[c[0] for c in CONSTANT_CASES])
def test_constant_index_adds_no_guard(name, fn):
    traced = quiet(tracejit.trace, fn, torch.randn(2, 3), check_trace=False)
    loaded = roundtrip(traced)
    for rows in (1, 4, 7):
        x = torch.randn(rows, 3)
        assert same(loaded(x), fn(x))
        assert same(quiet(traced, x), fn(x))
    assert len(traced.specializations) == 1
    # no guard on the index; the global list it indexes is guarded by value (trace/global_reads.py)
    kinds = [n.attrs["kind"] for n in traced.graph.nodes if n.op == "tracejit::guard"]
    assert set(kinds) <= {"global"}, kinds


def test_guarded_index_still_accepts_the_traced_size():
    traced = quiet(tracejit.trace, helper_no_op, torch.randn(2, 3), check_trace=False)
    loaded = roundtrip(traced)
    for _ in range(2):
        x = torch.randn(2, 5)   # another width, the same batch: the index guard holds
        assert same(loaded(x), helper_no_op(x))


def test_helper_called_with_traced_and_constant_index():
    """The same helper, once with a constant (no guard), once with a size (guarded)."""
    def f(x):
        return x * pick(1) + x * pick(x.size(0))
    traced = quiet(tracejit.trace, f, torch.randn(2, 3), check_trace=False)
    loaded = roundtrip(traced)   # saved before any specialization: the file holds the first trace only
    x = torch.randn(3, 3)
    assert same(quiet(traced, x), f(x))
    with pytest.raises(tracejit.GuardError) as info:
        loaded(x)
    assert info.value.source.lineno == line_of("helper_no_op")
    assert same(roundtrip(traced)(x), f(x))   # saved after specializing: the file serves x too


def test_user_profiler_is_kept_and_called():
    import sys
    events = []

    def prof(frame, event, arg):
        if event == "return" and frame.f_code is pick.__code__:
            events.append(event)
    sys.setprofile(prof)
    try:
        quiet(tracejit.trace, helper_no_op, torch.randn(2, 3), check_trace=False)
        assert sys.getprofile() is prof
    finally:
        sys.setprofile(None)
    assert events, "the user's profiler did not see pick() return while tracing"


def test_source_of_markers():
    assert inspect.getsourcefile(pick) == __file__


def test_profile_hook_removed_when_the_trace_fails():
    import sys

    def broken(x):
        n = x.size(0)
        raise ValueError(SCALES[n])
    with pytest.raises(ValueError):
        quiet(tracejit.trace, broken, torch.randn(2, 3), check_trace=False)
    assert sys.getprofile() is None
    assert not tracejit.is_tracing()


def test_index_in_a_generator_helper():
    def gen(n):
        yield SCALES[n]
        yield SCALES[n + 1]

    def f(x):
        a, b = gen(x.size(0))
        return x * a + b
    traced = quiet(tracejit.trace, f, torch.randn(2, 3), check_trace=False)
    x = torch.randn(4, 3)
    assert same(quiet(traced, x), f(x))
