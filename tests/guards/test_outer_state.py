"""Python state outside the traced modules (trace/outer_state.py, hunt19): forward changing its input containers,
a global memo cache, and what is not refused (a lazy global set-up, globals only read).

Globals and closure counters are patterns of state_patterns.py (test_state_patterns.py). Here: ``batch.pop("labels")``
and ``outputs.append(y)`` on the caller's containers; eager changes them, a traced program (torch.jit.trace's,
tracejit's before) returned the right tensors and left the caller's dict / list as it was, silently.
"""
from __future__ import annotations

import inspect
import warnings

import pytest
import torch

import tracejit
from trace_testlib import marker_lines

LINE = marker_lines(inspect.getsourcefile(inspect.currentframe()))
FILE = inspect.getsourcefile(inspect.currentframe())


def pop_labels(batch):                   # a training step's batch: the labels popped before the model runs
    labels = batch.pop("labels")  # @pop_labels
    return batch["x"] * 2 + labels


def collect(x, outputs):                 # intermediate results handed back through a list argument
    outputs.append(x * 2)  # @collect
    return x + 1


_GRIDS = {}


def memo_grid(x):                        # a module-level memo cache keyed by size, filled by forward
    n = x.shape[-1]
    if n not in _GRIDS:
        _GRIDS[n] = torch.linspace(-1, 1, n)  # @memo_grid
    return x * _GRIDS[n]


def _batch():
    return {"x": torch.randn(3), "labels": torch.randn(3)}


CASES = [("pop_labels", pop_labels, lambda: (_batch(),), lambda args: list(args[0])),
         ("collect", collect, lambda: (torch.randn(3), [torch.zeros(3)]), lambda args: len(args[1]))]


@pytest.mark.parametrize("name, fn, make, observe", CASES, ids=[c[0] for c in CASES])
def test_torch_jit_trace_leaves_the_caller_s_container_unchanged(name, fn, make, observe):
    eager_args, jit_args = make(), make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jit = torch.jit.trace(fn, make(), check_trace=False, strict=False)
    fn(*eager_args)
    jit(*jit_args)
    assert observe(eager_args) != observe(jit_args)


@pytest.mark.parametrize("name, fn, make, observe", CASES, ids=[c[0] for c in CASES])
def test_forward_changing_an_input_container_is_refused_at_its_line(name, fn, make, observe):
    with pytest.raises(tracejit.TraceError) as err:
        tracejit.trace(fn, make(), check_trace=False, strict=False)
    text = str(err.value)
    assert f"{FILE}:{LINE(name)}:" in text and "input" in text and "allow_frozen_python_state=True" in text, text


@pytest.mark.parametrize("name, fn, make, observe", CASES, ids=[c[0] for c in CASES])
def test_the_opt_out_warns_at_the_line(name, fn, make, observe):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = tracejit.trace(fn, make(), check_trace=False, strict=False, allow_frozen_python_state=True)
    assert (FILE, LINE(name)) in [(w.filename, w.lineno) for w in caught]
    assert any(e.kind == "python_state" and e.lineno == LINE(name) for e in traced.ledger)


def test_a_global_memo_cache_filled_by_forward_is_refused_as_on_a_module():
    _GRIDS.clear()
    with pytest.raises(tracejit.TraceError, match="global `_GRIDS`") as err:
        tracejit.trace(memo_grid, (torch.randn(2, 5),), check_trace=False)
    assert f"{FILE}:{LINE('memo_grid')}:" in str(err.value)
    traced = tracejit.trace(memo_grid, (torch.randn(2, 5),), check_trace=False)   # filled already: only read
    x = torch.randn(2, 5)
    torch.testing.assert_close(traced(x), memo_grid(x))


_SCALE = None
_TABLE = {"scale": 3.0}


def lazy_scale(x):
    global _SCALE
    if _SCALE is None:
        _SCALE = 2.0                     # set up on the first call, reused after: eager's answer too
    return x * _SCALE * _TABLE["scale"]


def test_a_lazy_global_set_up_and_globals_only_read_are_not_refused():
    global _SCALE
    _SCALE = None
    traced = tracejit.trace(lazy_scale, (torch.randn(3),), check_trace=False)
    assert any(e.kind == "python_state" and "`_SCALE`" in e.message for e in traced.ledger)
    x = torch.randn(4)
    torch.testing.assert_close(traced(x), lazy_scale(x))


def ones_in_float64(x):                  # the default dtype switched around a factory inside forward
    torch.set_default_dtype(torch.float64)  # @ones_in_float64
    y = torch.ones(x.shape)
    torch.set_default_dtype(torch.float32)
    return x + y


def test_setting_the_default_dtype_inside_forward_is_refused_at_its_line():
    """The factory is recorded without a dtype: the program replayed it in the caller's default (float32 where
    eager gives float64), silently."""
    assert ones_in_float64(torch.randn(3)).dtype == torch.float64
    with pytest.raises(tracejit.TraceError) as err:
        tracejit.trace(ones_in_float64, (torch.randn(3),), check_trace=False)
    assert f"{FILE}:{LINE('ones_in_float64')}:" in str(err.value) and "set_default_dtype" in str(err.value)
    assert torch.get_default_dtype() == torch.float32


def _closure_last_length():              # "same length as last call?" in a closure (hunt25)
    last = None

    def step(x):
        nonlocal last
        out = x * 2 if last == x.shape[0] else x
        last = x.shape[0]  # @closure_last_length
        return out
    return step


def _closure_recurrent():                # a recurrent state in a closure cell: None, then a tensor updated per call
    h = None

    def step(x):
        nonlocal h
        if h is None:
            h = torch.zeros_like(x)  # @closure_recurrent
        h = 0.5 * h + x
        return h
    return step


def _closure_lazy_table():               # a set-up on the first call, read after it: not carried state
    table = None

    def step(x):
        nonlocal table
        if table is None:
            table = [2.0, 3.0]
        return x * table[0]
    return step


@pytest.mark.parametrize("make,marker", [(_closure_last_length, "closure_last_length"),
                                         (_closure_recurrent, "closure_recurrent")])
def test_a_closure_cell_read_before_it_is_set_is_refused(make, marker):
    """The cell was None (a "lazy set-up") or held a tensor, but the next call reads what this one set: eager's
    second call differs from the first, torch.jit.trace's program keeps the first; tracejit refuses at the line."""
    eager = make()
    x = torch.ones(3)
    first, second = eager(x.clone()), eager(x.clone())
    assert not torch.equal(first, second)   # the pattern matters
    with pytest.raises(tracejit.TraceError) as err:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tracejit.trace(make(), (x,), check_trace=False)
    assert f"{FILE}:{LINE(marker)}:" in str(err.value), str(err.value)


def test_a_closure_set_up_read_after_it_is_not_refused():
    step = _closure_lazy_table()
    traced = tracejit.trace(step, (torch.ones(3),), check_trace=False)
    y = torch.randn(3)
    torch.testing.assert_close(traced(y), step(y))


class ClassMemo(torch.nn.Module):        # a class-level cache, filled by forward, whose tensor forward then updates
    _buf: dict = {}

    def forward(self, x):
        b = ClassMemo._buf.setdefault(x.shape[-1], torch.zeros(x.shape[-1]))  # @class_memo
        b.add_(1)
        return x + b


def test_a_class_level_cache_filled_by_forward_is_refused_as_a_global_one():
    """Before, the private class dict was exempt: the trace made the tensor (a factory in the program) and stored it;
    eager's later calls reuse and update the stored one, the program made a fresh one each call: silently 1 where
    eager says 2, 3, ... Now the first trace, which fills it, is refused (as ``_GRIDS``); once filled, it traces."""
    ClassMemo._buf.clear()
    with pytest.raises(tracejit.TraceError) as err:
        tracejit.trace(ClassMemo(), (torch.zeros(3),), check_trace=False)
    assert f"{FILE}:{LINE('class_memo')}:" in str(err.value) and "`_buf` of class ClassMemo" in str(err.value)
    ClassMemo._buf.clear()
    m = ClassMemo()
    m(torch.zeros(3))   # filled by an eager call
    traced = tracejit.trace(m, (torch.zeros(3),), check_trace=False)
    torch.testing.assert_close(traced(torch.zeros(3)), m(torch.zeros(3)) - 1)   # the program updated it too


class CountingFn(torch.autograd.Function):   # a custom Function keeping a Python call counter on its class
    calls = 0

    @staticmethod
    def forward(ctx, x):
        CountingFn.calls += 1  # @function_counter
        return x * CountingFn.calls

    @staticmethod
    def backward(ctx, g):
        return g


class Tables:                             # a plain user class used as a registry (not a module: not held)
    scale = 2.0
    grids = {}


def counted_by_function(x):
    return CountingFn.apply(x)


def from_registry(x):
    n = x.shape[-1]
    if n not in Tables.grids:
        Tables.grids[n] = torch.linspace(-1, 1, n)  # @registry_fill
    return x * Tables.grids[n] * Tables.scale


@pytest.mark.parametrize("fn,marker,what,moves", [
    (counted_by_function, "function_counter", "`CountingFn.calls`", True),
    (from_registry, "registry_fill", "`Tables.grids`", False),   # a memo: refused as the module-level _GRIDS is
], ids=["autograd_function_counter", "registry_class_cache"])
def test_a_user_class_named_as_a_global_changed_by_forward_is_refused(fn, marker, what, moves):
    """hunt26: a class that is neither a traced module's nor along its MRO (a custom autograd Function's counter, a
    registry class's cache): forward changed its attribute, and the end-of-trace guard held the value forward
    left, so the program passed its guard forever with the trace's answer (eager: x*2, x*3, ...; torch.jit.trace
    froze it too). Now its attributes are fingerprinted when user code naming it first runs and compared after."""
    CountingFn.calls = 0
    Tables.grids.clear()
    x = torch.ones(3)
    jit = torch.jit.trace(fn, (x,), check_trace=False)
    assert torch.equal(jit(x), fn(x)) is not moves   # eager moved on, torch's program did not
    CountingFn.calls = 0
    Tables.grids.clear()
    with pytest.raises(tracejit.TraceError) as err:
        tracejit.trace(fn, (x,), check_trace=False)
    text = str(err.value)
    assert f"{FILE}:{LINE(marker)}:" in text and what in text and "allow_frozen_python_state=True" in text


def test_a_user_class_only_read_is_guarded_not_refused():
    Tables.grids.clear()
    x = torch.ones(4)
    from_registry(x)   # the cache set up by a call before tracing
    traced = tracejit.trace(from_registry, (x,), check_trace=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Tables, "scale", 5.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.testing.assert_close(traced(x), from_registry(x))
