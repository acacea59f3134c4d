"""Symbolic sizes, size specialization, TracerWarnings and the ledger.

Covers:
- sizes read from a tensor and passed on to tensor ops are recorded, so traces replay on other
  batch sizes / sequence lengths (hypothesis draws the new shapes);
- uses of a size that cannot be recorded specialize the trace, warn at the user's line and are
  kept in the ledger as ``size`` entries;
- every read of a value out of a tensor (bool, item, float, int, tolist, numpy, iteration) and
  every tensor captured as a constant warns at the user's file and line and is a ledger entry;
- with TracerWarning turned into an error, the warning is raised out of ``tracejit.trace`` and
  no global state is left changed;
- ``torch.jit.is_tracing()`` / ``tracejit.is_tracing()`` inside and after tracing.

Expected line numbers are found through ``# @name`` marker comments (see ``line_of``).
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tracejit
from trace_testlib import assert_state_clean, marker_lines, snapshot_state

torch.manual_seed(0)

_THIS_FILE = __file__
line_of = marker_lines(_THIS_FILE)


def trace_recording(fn, example, **kwargs):
    """Trace with every warning recorded; returns (traced, [TracerWarning records])."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = tracejit.trace(fn, example, **kwargs)
    return traced, [w for w in caught if issubclass(w.category, tracejit.TracerWarning)]


def assert_moves(fn, shape):
    """The output depends on the input values (so comparing outputs means something)."""
    a = fn(torch.randn(*shape))
    b = fn(torch.randn(*shape))
    assert a.shape != b.shape or not torch.allclose(a, b), "output does not depend on the input"


# --------------------------------------------------------------------------------------------
# 6. sizes stay symbolic
# --------------------------------------------------------------------------------------------

def size_view(x):
    return x.view(x.size(0), -1)


def size_reshape_bh(x):
    b, t, h = x.shape
    return x.transpose(1, 2).reshape(b, -1, h)


def size_view_arith(x):
    b, t, h = x.shape
    return x.view(b * t, h // 2, 2)


def size_zeros(x):
    return torch.zeros(x.size(0), 4) + x.sum((1, 2)).unsqueeze(1)


def size_arange(x):
    return torch.arange(x.size(0)) * x.mean()


def size_ones(x):
    return torch.ones(x.shape[0], x.shape[1] * 2) * x.amax(2).repeat(1, 2)


def size_numel(x):
    return x.reshape(x.numel()) / x.numel()


def size_int_arith(x):
    b, t, h = x.shape
    pad = x.new_zeros(b + 1, t * 2 - 1, h)
    pad[: b, : t] = x
    return pad[:, : t - 1] + pad[:, 1: t]


def size_floordiv_mod(x):
    b, t, h = x.shape
    flat = x.reshape(-1)
    return flat[: (b * t * h) // 2] * ((b * t) % 3 + 1)


def size_negative_dims(x):
    return x.view(-1, x.size(-1)) @ torch.ones(x.shape[-1], x.shape[-2] + 1)


def size_rank(x):
    return x.permute(*range(x.dim() - 1, -1, -1)).sum(dim=x.dim() - 1)


def size_torch_size(x):
    return x.reshape(*x.size()[:1], -1).expand(x.size(0), x.size(1) * x.size(2))


SIZE_FUNCTIONS = [size_view, size_reshape_bh, size_view_arith, size_zeros, size_arange, size_ones, size_numel,
                  size_int_arith, size_floordiv_mod, size_negative_dims, size_rank, size_torch_size]
EXAMPLE_SHAPE = (2, 4, 6)
_TRACED_SIZES: dict = {}


def traced_size_fn(fn):
    if fn not in _TRACED_SIZES:
        torch.manual_seed(1)
        with warnings.catch_warnings():
            # sizes are recorded: nothing is specialized, so nothing warns
            warnings.simplefilter("error", tracejit.TracerWarning)
            _TRACED_SIZES[fn] = tracejit.trace(fn, torch.randn(*EXAMPLE_SHAPE))
    return _TRACED_SIZES[fn]


@pytest.mark.parametrize("fn", SIZE_FUNCTIONS, ids=lambda f: f.__name__)
@settings(max_examples=15, deadline=None)
@given(b=st.integers(1, 7), t=st.integers(1, 6), half_h=st.integers(1, 4))
def test_sizes_replay_on_other_shapes(fn, b, t, half_h):
    traced = traced_size_fn(fn)
    shape = (b, t, 2 * half_h)
    torch.manual_seed(b * 100 + t * 10 + half_h)
    x = torch.randn(*shape)
    expected = fn(x.clone())
    actual = traced(x.clone())
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("fn", SIZE_FUNCTIONS, ids=lambda f: f.__name__)
def test_size_functions_depend_on_input_and_leave_empty_ledger(fn):
    torch.manual_seed(2)
    assert_moves(fn, (3, 5, 4))
    traced = traced_size_fn(fn)
    assert [e for e in traced.ledger if e.kind == "size"] == []


def test_size_is_recorded_in_graph_and_code_has_no_example_batch():
    def f(x):
        return torch.zeros(x.size(0), 4) + x.sum(1, keepdim=True)

    traced = tracejit.trace(f, torch.randn(13, 3))
    assert "aten::size.int" in str(traced.graph)
    assert "13" not in traced.code
    for b in (1, 2, 29):
        x = torch.randn(b, 3)
        torch.testing.assert_close(traced(x), f(x))


def test_sizes_through_nn_module_forward():
    class Heads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            b, t, _ = x.shape
            y = self.proj(x).view(b, t, 2, 4).transpose(1, 2)
            return y.reshape(b * 2, t, 4)

    torch.manual_seed(3)
    m = Heads().eval()
    traced = tracejit.trace(m, torch.randn(2, 3, 8))
    for shape in [(1, 1, 8), (5, 7, 8), (3, 2, 8)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(traced(x), m(x))


# ---- sizes used where they cannot be recorded ------------------------------------------------

def size_branch(x):
    if x.size(0) > 2:  # @size_branch
        return x * 2
    return x - 1


def _python_only(n: int) -> float:
    return float(math.factorial(n))


def size_int_to_python(x):
    n = int(x.size(0))  # @size_int
    return x * _python_only(n)


def size_range(x):
    acc = x[0]
    for i in range(x.size(0)):  # @size_range
        acc = acc + x[i]
    return acc


def size_len_to_op(x):
    return torch.zeros(len(x), 2) + x.sum()  # @size_len


@pytest.mark.parametrize("fn,marker", [
    (size_branch, "size_branch"),
    (size_int_to_python, "size_int"),
    pytest.param(size_range, "size_range"),
], ids=["branch", "int_to_python", "range"])
def test_specialized_size_warns_at_user_line_and_is_in_ledger(fn, marker):
    x = torch.randn(3, 4)
    traced, tw = trace_recording(fn, x, check_trace=False)
    line = line_of(marker)
    at_line = [w for w in tw if w.filename == _THIS_FILE and w.lineno == line]
    assert at_line, [(w.filename, w.lineno, str(w.message)) for w in tw]
    # no warning points into tracejit or torch
    assert all(w.filename == _THIS_FILE for w in tw), [(w.filename, w.lineno) for w in tw]
    entries = [e for e in traced.ledger if e.kind == "size"]
    assert entries
    assert all(e.filename == _THIS_FILE and e.lineno == line for e in entries)
    assert entries[0].value == 3


def test_len_of_tensor_is_recorded_or_warned():
    x = torch.randn(3, 4)
    traced, tw = trace_recording(size_len_to_op, x, check_trace=False)
    line = line_of("size_len")
    at_line = [w for w in tw if w.filename == _THIS_FILE and w.lineno == line]
    if at_line:
        # specialized: must be in the ledger as a size read at that line
        assert any(e.kind == "size" and e.lineno == line and e.filename == _THIS_FILE for e in traced.ledger)
    else:
        # not warned: then it must have been recorded and replay on other batch sizes
        for b in (1, 5):
            new = torch.randn(b, 4)
            expected = size_len_to_op(new)
            out = traced(new)
            assert out.shape == expected.shape
            torch.testing.assert_close(out, expected)


# --------------------------------------------------------------------------------------------
# 7. TracerWarning at the user's line for value reads, iteration, constants; the ledger
# --------------------------------------------------------------------------------------------

def read_if_compare(x):
    if x.sum() > 0:  # @read_if_compare
        return x * 2
    return x - 1


def read_if_tensor(x):
    t = x.abs().sum() > 0
    if t:  # @read_if_tensor
        return x + 1
    return x


def read_bool(x):
    flag = bool(x.max() > 0)  # @read_bool
    return x * (2.0 if flag else 3.0)


def read_item(x):
    s = x.max().item()  # @read_item
    return x * s


def read_float(x):
    s = float(x.min())  # @read_float
    return x + s


def read_int(x):
    n = int(x.sum())  # @read_int
    return x * n


def read_tolist(x):
    vals = x.tolist()  # @read_tolist
    return x * vals[0]


def read_numpy(x):
    arr = x.numpy()  # @read_numpy
    return x + float(arr.sum())


def read_iteration(x):
    rows = []
    for row in x:  # @read_iteration
        rows.append(row * 2)
    return torch.stack(rows)


GLOBAL_CONST = torch.tensor([0.5, -1.5, 2.5])


def read_global_const(x):
    return x + GLOBAL_CONST  # @read_global_const


def _make_closure():
    captured = torch.tensor([3.0, 4.0, -5.0])

    def read_closure_const(x):
        return x * captured  # @read_closure_const

    return read_closure_const, captured


read_closure_const, CLOSURE_CONST = _make_closure()

# value the ledger should hold for each case, computed from the example input
_EXAMPLE = torch.tensor([1.0, 2.0, 3.0])

VALUE_READ_CASES = [
    pytest.param(read_if_compare, "read_if_compare", "value_read", lambda x: True, id="if_compare"),
    pytest.param(read_if_tensor, "read_if_tensor", "value_read", lambda x: True, id="if_tensor"),
    pytest.param(read_bool, "read_bool", "value_read", lambda x: True, id="bool"),
    pytest.param(read_item, "read_item", "value_read", lambda x: x.max().item(), id="item"),
    pytest.param(read_float, "read_float", "value_read", lambda x: float(x.min()), id="float"),
    pytest.param(read_int, "read_int", "value_read", lambda x: int(x.sum()), id="int"),
    pytest.param(read_tolist, "read_tolist", "value_read", lambda x: x.tolist(), id="tolist"),
    pytest.param(read_numpy, "read_numpy", "value_read", lambda x: x.tolist(), id="numpy"),
    pytest.param(read_iteration, "read_iteration", "iteration", lambda x: len(x), id="iteration"),
    pytest.param(read_global_const, "read_global_const", "constant", lambda x: GLOBAL_CONST.tolist(),
                 id="global_constant"),
    pytest.param(read_closure_const, "read_closure_const", "constant", lambda x: CLOSURE_CONST.tolist(),
                 id="closure_constant"),
]


def _example_for(fn):
    return _EXAMPLE.reshape(3, 1).repeat(1, 2) if fn is read_iteration else _EXAMPLE.clone()


@pytest.mark.parametrize("fn,marker,kind,seen", VALUE_READ_CASES)
def test_tracer_warning_at_user_line_and_ledger_entry(fn, marker, kind, seen):
    x = _example_for(fn)
    traced, tw = trace_recording(fn, x, check_trace=False)
    line = line_of(marker)
    assert len(tw) == 1, [(w.filename, w.lineno, str(w.message)) for w in tw]
    assert tw[0].filename == _THIS_FILE
    assert tw[0].lineno == line
    entries = [e for e in traced.ledger if e.kind == kind]
    assert len(entries) == 1, traced.ledger
    entry = entries[0]
    assert isinstance(entry, tracejit.LedgerEntry)
    assert entry.filename == _THIS_FILE
    assert entry.lineno == line
    expected_value = seen(x)
    if isinstance(expected_value, list):
        torch.testing.assert_close(torch.as_tensor(entry.value, dtype=torch.float32),
                                   torch.as_tensor(expected_value, dtype=torch.float32))
    else:
        assert entry.value == expected_value
    # the entry's message is a readable string and str(entry) names the location
    assert isinstance(entry.message, str) and entry.message
    assert str(line) in str(entry)


@pytest.mark.parametrize("fn,marker,kind,seen", VALUE_READ_CASES)
def test_tracer_warning_as_error_is_raised_and_state_is_clean(fn, marker, kind, seen):
    x = _example_for(fn)
    before = snapshot_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracejit.TracerWarning)
        with pytest.raises(tracejit.TracerWarning):
            tracejit.trace(fn, x, check_trace=False)
    assert_state_clean(before)


def test_size_specialization_as_error_is_raised_and_state_is_clean():
    x = torch.randn(3, 4)
    before = snapshot_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracejit.TracerWarning)
        with pytest.raises(tracejit.TracerWarning):
            tracejit.trace(size_branch, x)
    assert_state_clean(before)


def test_tracer_warning_as_error_inside_module_forward_restores_state():
    class Reads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            y = self.lin(x)
            return y * y.max().item()

    m = Reads()
    x = torch.randn(2, 3)
    before = snapshot_state()
    with torch.no_grad():
        no_grad_before = snapshot_state()
        with warnings.catch_warnings():
            warnings.simplefilter("error", tracejit.TracerWarning)
            with pytest.raises(tracejit.TracerWarning):
                tracejit.trace(m, x)
        assert_state_clean(no_grad_before)
    assert_state_clean(before)


def helper_reads(t):
    return t.sum().item()  # @helper_reads


def read_two_places(x):
    a = helper_reads(x)
    b = float(x.max())  # @read_two_b
    return x * a + b


def test_each_read_is_its_own_warning_and_entry_in_order():
    x = torch.tensor([1.0, -2.0, 4.0])
    traced, tw = trace_recording(read_two_places, x, check_trace=False)
    lines = [line_of("helper_reads"), line_of("read_two_b")]
    assert [(w.filename, w.lineno) for w in tw] == [(_THIS_FILE, ln) for ln in lines]
    reads = [e for e in traced.ledger if e.kind == "value_read"]
    assert [(e.filename, e.lineno) for e in reads] == [(_THIS_FILE, ln) for ln in lines]
    assert reads[0].value == pytest.approx(x.sum().item())
    assert reads[1].value == pytest.approx(float(x.max()))


def test_value_read_in_module_forward_points_at_module_source():
    class Scale(torch.nn.Module):
        def forward(self, x):
            return x / x.norm().item()  # @module_read

    traced, tw = trace_recording(Scale(), torch.tensor([3.0, 4.0]), check_trace=False)
    line = line_of("module_read")
    assert [(w.filename, w.lineno) for w in tw] == [(_THIS_FILE, line)]
    reads = [e for e in traced.ledger if e.kind == "value_read"]
    assert len(reads) == 1 and reads[0].lineno == line and reads[0].value == pytest.approx(5.0)


def test_parameters_buffers_and_inputs_are_not_constants():
    class WithBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.register_buffer("shift", torch.tensor([1.0, 2.0, 3.0]))

        def forward(self, x, y):
            return self.lin(x) + self.shift + y

    torch.manual_seed(4)
    traced, tw = trace_recording(WithBuffer(), (torch.randn(2, 3), torch.randn(2, 3)), check_trace=False)
    assert tw == []
    assert [e for e in traced.ledger if e.kind == "constant"] == []


def test_global_constant_trace_keeps_value_and_replays():
    x = torch.randn(3)
    traced, _ = trace_recording(read_global_const, x, check_trace=False)
    new = torch.randn(3)
    assert not torch.allclose(read_global_const(new), read_global_const(x))
    torch.testing.assert_close(traced(new), read_global_const(new))


def test_deterministic_trace_leaves_state_unchanged():
    def f(x, w):
        return torch.relu(x @ w).sum(1)

    torch.manual_seed(5)
    args = (torch.randn(3, 4), torch.randn(4, 2))
    checks = [(torch.randn(5, 4), torch.randn(4, 2))]
    before = snapshot_state()
    traced = tracejit.trace(f, args, check_inputs=checks)
    assert_state_clean(before)
    with torch.no_grad():
        grad_before = snapshot_state()
        tracejit.trace(f, args)
        assert_state_clean(grad_before)
    new = (torch.randn(6, 4), torch.randn(4, 2))
    torch.testing.assert_close(traced(*new), f(*new))


# ---- is_tracing --------------------------------------------------------------------------------

def test_is_tracing_inside_function_and_after():
    seen = []

    def f(x):
        seen.append((torch.jit.is_tracing(), tracejit.is_tracing()))
        return x + 1

    assert (torch.jit.is_tracing(), tracejit.is_tracing()) == (False, False)
    traced = tracejit.trace(f, torch.randn(3), check_trace=False, allow_frozen_python_state=True)   # a spy
    assert seen == [(True, True)]
    assert (torch.jit.is_tracing(), tracejit.is_tracing()) == (False, False)
    seen.clear()
    traced(torch.randn(4))
    assert seen == []   # the traced program does not run the Python function
    f(torch.randn(2))
    assert seen == [(False, False)]


def test_is_tracing_inside_module_forward():
    seen = []

    class Inner(torch.nn.Module):
        def forward(self, x):
            seen.append(("inner", torch.jit.is_tracing(), tracejit.is_tracing()))
            return x * 2

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            seen.append(("outer", torch.jit.is_tracing(), tracejit.is_tracing()))
            return self.inner(x) + 1

    tracejit.trace(Outer(), torch.randn(2), check_trace=False, allow_frozen_python_state=True)   # `seen`: a spy
    assert seen == [("outer", True, True), ("inner", True, True)]
    assert torch.jit.is_tracing() is False and tracejit.is_tracing() is False


def test_branch_on_is_tracing_is_taken_while_tracing():
    def f(x):
        if torch.jit.is_tracing():
            return x * 3
        return x * 5

    traced = tracejit.trace(f, torch.randn(3), check_trace=False)
    x = torch.randn(4)
    torch.testing.assert_close(traced(x), x * 3)
    torch.testing.assert_close(f(x), x * 5)
