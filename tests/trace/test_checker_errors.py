"""The trace checker (check_trace / check_inputs / check_tolerance), legacy arguments, and
the errors raised for bad inputs and failures while tracing.

Expected line numbers are found through ``# @name`` marker comments (see ``line_of``).
"""
from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch.nn.functional as F

import tracejit
from trace_testlib import assert_state_clean, marker_lines, snapshot_state
from tracejit.pytree import flatten

torch.manual_seed(0)

_THIS_FILE = __file__
line_of = marker_lines(_THIS_FILE)


def first_diverging_line(message: str) -> str:
    lines = [ln for ln in message.splitlines() if "First diverging operation" in ln]
    assert len(lines) == 1, message
    return lines[0]


def quiet_trace(*args, **kwargs):
    """tracejit.trace with TracerWarnings silenced (for tests about something else)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        return tracejit.trace(*args, **kwargs)


# --------------------------------------------------------------------------------------------
# 8. the checker
# --------------------------------------------------------------------------------------------

def branch_on_values(x):
    if x.sum() > 0:  # @branch_cond
        return x * 2  # @branch_pos
    return x - 1  # @branch_neg


def test_value_branch_with_other_check_input_raises():
    pos = torch.tensor([1.0, 2.0, 3.0])
    neg = torch.tensor([-3.0, -1.0, -2.0])
    # the two branches give different results on the check input
    assert not torch.allclose(neg * 2, neg - 1)
    with pytest.raises(tracejit.TracingCheckError) as info:
        quiet_trace(branch_on_values, pos, check_inputs=[(neg,)])
    msg = str(info.value)
    first = first_diverging_line(msg)
    assert any(f"{_THIS_FILE}:{line_of(m)}" in first for m in ("branch_pos", "branch_neg")), first
    # the program's guard on the branch fails on the check input (no silently wrong numbers)
    assert "GuardError" in msg and f"{_THIS_FILE}:{line_of('branch_cond')}" in msg, msg
    # graph diff: the traced op removed, the retraced op added
    assert re.search(r"^-.*aten::mul", msg, re.M), msg
    assert re.search(r"^\+.*aten::sub", msg, re.M), msg
    assert info.value.graph_diff and "aten::sub" in info.value.graph_diff


def test_value_branch_without_diverging_check_input_passes():
    pos = torch.tensor([1.0, 2.0, 3.0])
    traced = quiet_trace(branch_on_values, pos, check_inputs=[(torch.tensor([4.0, 0.5]),), (pos * 3,)])
    x = torch.tensor([0.5, 0.25, 2.0, 1.0])
    torch.testing.assert_close(traced(x), branch_on_values(x))


def branch_prefix(x):
    y = x * 2  # @prefix_common
    if x.sum() > 0:
        return y
    return y.neg()  # @prefix_extra


def test_first_diverging_operation_when_retrace_has_extra_op():
    pos = torch.tensor([1.0, 2.0, 3.0])
    neg = -pos
    with pytest.raises(tracejit.TracingCheckError) as info:
        quiet_trace(branch_prefix, pos, check_inputs=[(neg,)])
    first = first_diverging_line(str(info.value))
    assert "neg" in first
    assert f"{_THIS_FILE}:{line_of('prefix_extra')}" in first


def spec_view(x):
    return x.view(int(x.size(0)) * 2, -1)


def spec_ones(x):
    return torch.ones(int(x.shape[0])) + x


def spec_add(x):
    return x + int(x.shape[0])


@pytest.mark.parametrize("fn,example,check", [
    pytest.param(spec_view, torch.randn(4, 2), torch.randn(6, 2), id="view_int_size"),
    pytest.param(spec_ones, torch.randn(4), torch.randn(6), id="ones_int_shape"),
    pytest.param(spec_add, torch.randn(4), torch.randn(6), id="add_int_shape"),
])
def test_specialized_size_with_other_batch_check_input_raises(fn, example, check):
    # eager runs fine on both batch sizes
    fn(example)
    fn(check)
    with pytest.raises(tracejit.TracingCheckError):
        quiet_trace(fn, example, check_inputs=[(check,)])


_STALE = {"c": torch.zeros(3)}


def stale_constant(x):
    out = x + _STALE["c"]  # @stale_constant
    # rebinding the global: the next eager call sees another constant; the trace keeps the first one,
    # and the retrace graph prints the same (constants are not printed by value)
    _STALE["c"] = _STALE["c"] + 1e-3
    return out


def test_check_tolerance_is_atol_and_rtol():
    x = torch.tensor([1.0, -1.0, 0.5])
    _STALE["c"] = torch.zeros(3)
    with pytest.raises(tracejit.TracingCheckError) as info:
        quiet_trace(stale_constant, x)          # default tolerance 1e-5
    msg = str(info.value)
    assert "max absolute error" in msg and "max relative error" in msg
    # a loose tolerance accepts the same numeric difference (atol)
    _STALE["c"] = torch.zeros(3)
    quiet_trace(stale_constant, x, check_tolerance=1e-2)
    # large values: the default tolerance accepts the difference through rtol
    _STALE["c"] = torch.zeros(3)
    quiet_trace(stale_constant, x * 1000)


def test_first_diverging_constant_names_its_line():
    _STALE["c"] = torch.zeros(3)
    with pytest.raises(tracejit.TracingCheckError) as info:
        quiet_trace(stale_constant, torch.tensor([1.0, -1.0, 0.5]))
    first = first_diverging_line(str(info.value))
    assert f"{_THIS_FILE}:{line_of('stale_constant')}" in first


def test_correct_trace_with_check_inputs_of_other_shapes_passes():
    def f(x, w):
        return torch.matmul(x, w).softmax(-1) * x.size(-2)

    torch.manual_seed(1)
    example = (torch.randn(2, 3, 4), torch.randn(4, 5))
    checks = [(torch.randn(7, 1, 4), torch.randn(4, 5)), (torch.randn(1, 9, 4), torch.randn(4, 5)),
              (torch.randn(3, 3, 4), torch.randn(4, 2))]
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracejit.TracerWarning)
        traced = tracejit.trace(f, example, check_inputs=checks, check_tolerance=1e-6)
    for args in checks:
        torch.testing.assert_close(traced(*args), f(*args))


def test_check_trace_false_skips_checker():
    pos = torch.tensor([1.0, 2.0, 3.0])
    traced = quiet_trace(branch_on_values, pos, check_trace=False, check_inputs=[(-pos,)])
    torch.testing.assert_close(traced(pos), branch_on_values(pos))


def rand_fn(x):
    return x + torch.rand(x.shape)  # @rand_line


def dropout_fn(x):
    return F.dropout(x, 0.5, training=True)  # @dropout_line


@pytest.mark.parametrize("fn,word,marker", [(rand_fn, "rand", "rand_line"),
                                            (dropout_fn, "dropout", "dropout_line")])
def test_nondeterministic_function_warns_instead_of_check_error(fn, word, marker):
    torch.manual_seed(2)
    x = torch.randn(64) + 3
    check = torch.randn(17) + 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = tracejit.trace(fn, x, check_inputs=[(check,)])
    tw = [w for w in caught if issubclass(w.category, tracejit.TracerWarning)]
    assert any(word in str(w.message) for w in tw), [str(w.message) for w in tw]
    nondet = [e for e in traced.ledger if e.kind == "nondeterministic"]
    assert nondet and nondet[0].filename == _THIS_FILE and nondet[0].lineno == line_of(marker)
    assert traced(check).shape == check.shape


def test_nondeterministic_warning_points_at_the_random_op():
    # the warning is placed on the user's line that made the random op, not inside tracejit or torch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracejit.trace(rand_fn, torch.randn(8))
    tw = [w for w in caught if issubclass(w.category, tracejit.TracerWarning) and "rand" in str(w.message)]
    assert tw and tw[0].filename == _THIS_FILE
    assert tw[0].lineno == line_of("rand_line")


def test_dropout_module_in_train_mode_warns_instead_of_check_error():
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracejit.trace(m, torch.randn(8, 4), check_inputs=[(torch.randn(5, 4),)])
    tw = [w for w in caught if issubclass(w.category, tracejit.TracerWarning)]
    assert any("dropout" in str(w.message) for w in tw), [str(w.message) for w in tw]
    # the same model in eval mode has no random op and traces without that warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracejit.TracerWarning)
        traced = tracejit.trace(m.eval(), torch.randn(8, 4), check_inputs=[(torch.randn(5, 4),)])
    x = torch.randn(3, 4)
    torch.testing.assert_close(traced(x), m(x))


def read_once(x):
    t = x.min() > 0
    if t:  # @read_once
        return x.log()
    return x


def test_checker_retrace_does_not_repeat_warnings():
    x = torch.tensor([1.0, 2.0, 3.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracejit.trace(read_once, x, check_inputs=[(x * 2,), (torch.tensor([5.0, 0.5]),)])
    tw = [w for w in caught if issubclass(w.category, tracejit.TracerWarning)]
    assert [(w.filename, w.lineno) for w in tw] == [(_THIS_FILE, line_of("read_once"))]


def test_checker_retrace_does_not_repeat_warnings_for_modules():
    class ReadOnce(torch.nn.Module):
        def forward(self, x):
            return read_once(x)

    x = torch.tensor([1.0, 2.0, 3.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracejit.trace_module(ReadOnce(), {"forward": x}, check_inputs=[{"forward": x * 2}, {"forward": x + 1}])
    tw = [w for w in caught if issubclass(w.category, tracejit.TracerWarning)]
    assert [(w.filename, w.lineno) for w in tw] == [(_THIS_FILE, line_of("read_once"))]


class TwoMethods(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).relu()

    def scaled(self, x, y):
        h = self.lin(x)
        if y.sum() > 0:
            return h * y  # @method_pos
        return h - y  # @method_neg


def test_trace_module_check_inputs_dicts_pass_for_correct_trace():
    torch.manual_seed(4)
    m = TwoMethods()
    inputs = {"forward": torch.randn(2, 4), "scaled": (torch.randn(2, 4), torch.rand(2, 3) + 0.1)}
    checks = [{"forward": torch.randn(5, 4), "scaled": (torch.randn(6, 4), torch.rand(6, 3) + 0.1)},
              {"forward": torch.randn(1, 4)}]
    traced = quiet_trace_module(m, inputs, check_inputs=checks)
    x, y = torch.randn(3, 4), torch.rand(3, 3) + 0.1
    torch.testing.assert_close(traced(x), m(x))
    torch.testing.assert_close(traced.scaled(x, y), m.scaled(x, y))


def test_trace_module_check_inputs_dicts_catch_divergence():
    torch.manual_seed(5)
    m = TwoMethods()
    inputs = {"forward": torch.randn(2, 4), "scaled": (torch.randn(2, 4), torch.rand(2, 3) + 0.1)}
    # the check input for 'scaled' takes the other branch
    checks = [{"forward": torch.randn(5, 4), "scaled": (torch.randn(6, 4), -torch.rand(6, 3) - 0.5)}]
    with pytest.raises(tracejit.TracingCheckError) as info:
        quiet_trace_module(m, inputs, check_inputs=checks)
    msg = str(info.value)
    first = first_diverging_line(msg)
    assert any(f"{_THIS_FILE}:{line_of(k)}" in first for k in ("method_pos", "method_neg")), first
    assert "GuardError" in msg and "guard failed" in msg, msg
    # without check inputs the example alone agrees with itself
    quiet_trace_module(m, inputs)


def quiet_trace_module(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        return tracejit.trace_module(*args, **kwargs)


def test_batchnorm_train_running_stats_after_checked_trace():
    torch.manual_seed(6)
    x = torch.randn(8, 3) * 3 + 2
    checks = [(torch.randn(5, 3) - 4,), (torch.randn(11, 3) * 7,)]
    bn = torch.nn.BatchNorm1d(3).train()
    ref = torch.nn.BatchNorm1d(3).train()
    init_mean = bn.running_mean.clone()
    ref(x.clone())
    assert not torch.allclose(ref.running_mean, init_mean)   # one call moves the stats
    traced = tracejit.trace(bn, x, check_inputs=checks)
    # observed: the checker restores buffers after its runs, so the stats are those of ONE call on the
    # example input (the trace run), whatever the check inputs
    torch.testing.assert_close(bn.running_mean, ref.running_mean)
    torch.testing.assert_close(bn.running_var, ref.running_var)
    assert int(bn.num_batches_tracked) == 1
    # the traced module shares the buffers and keeps updating them in train mode
    assert traced.running_mean is bn.running_mean
    y = torch.randn(4, 3)
    ref(y.clone())
    traced(y.clone())
    torch.testing.assert_close(bn.running_mean, ref.running_mean)


# --------------------------------------------------------------------------------------------
# 11. legacy arguments
# --------------------------------------------------------------------------------------------

def affine(x, y):
    return 2 * x + y


def test_optimize_warns_deprecation_trace():
    x, y = torch.randn(3), torch.randn(3)
    with pytest.warns(DeprecationWarning):
        traced = tracejit.trace(affine, (x, y), optimize=True)
    a, b = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(traced(a, b), affine(a, b))


def test_optimize_warns_deprecation_trace_module():
    m = TwoMethods()
    with pytest.warns(DeprecationWarning):
        traced = tracejit.trace_module(m, {"forward": torch.randn(2, 4)}, optimize=True)
    x = torch.randn(3, 4)
    torch.testing.assert_close(traced(x), m(x))


def test_no_deprecation_warning_without_optimize():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        tracejit.trace(affine, (torch.randn(3), torch.randn(3)))


def test_module_class_and_compilation_unit_are_accepted():
    class Marker:
        pass

    traced = tracejit.trace(affine, (torch.randn(3), torch.randn(3)), _module_class=Marker,
                            _compilation_unit=object())
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(traced(a, b), affine(a, b))
    m = TwoMethods()
    tm = tracejit.trace_module(m, {"forward": torch.randn(2, 4)}, _module_class=Marker, _compilation_unit=object())
    x = torch.randn(3, 4)
    torch.testing.assert_close(tm(x), m(x))
    tm2 = tracejit.trace(m, torch.randn(2, 4), _module_class=Marker, _compilation_unit=object())
    torch.testing.assert_close(tm2(x), m(x))


def test_store_inputs_keeps_example_inputs():
    x, y = torch.randn(3), torch.randn(3)
    traced = tracejit.trace(affine, (x, y), _store_inputs=True)
    leaves, _ = flatten(traced.example_inputs)
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    assert len(tensors) == 2
    assert any(t is x or torch.equal(t, x) for t in tensors)
    assert any(t is y or torch.equal(t, y) for t in tensors)
    # default is True
    assert hasattr(tracejit.trace(affine, (x, y)), "example_inputs")


def test_store_inputs_for_module():
    m = TwoMethods()
    x = torch.randn(2, 4)
    traced = tracejit.trace(m, x, _store_inputs=True)
    leaves, _ = flatten(traced.example_inputs)
    assert any(isinstance(t, torch.Tensor) and (t is x or torch.equal(t, x)) for t in leaves)


def test_store_inputs_false_keeps_nothing():
    traced = tracejit.trace(affine, (torch.randn(3), torch.randn(3)), _store_inputs=False)
    assert getattr(traced, "example_inputs", None) is None


# --------------------------------------------------------------------------------------------
# 15. bad inputs, failures while tracing
# --------------------------------------------------------------------------------------------

def two_args(alpha_in, beta_in):
    return alpha_in * 2 + beta_in


@pytest.fixture(scope="module")
def traced_two():
    return tracejit.trace(two_args, (torch.randn(3), torch.randn(3)))


@pytest.mark.parametrize("args", [(torch.randn(3),), (torch.randn(3), torch.randn(3), torch.randn(3)), ()],
                         ids=["too_few", "too_many", "none"])
def test_wrong_arity_names_signature(traced_two, args):
    with pytest.raises(TypeError) as info:
        traced_two(*args)
    msg = str(info.value)
    assert "alpha_in" in msg and "beta_in" in msg


def test_unknown_keyword_names_signature(traced_two):
    with pytest.raises(TypeError) as info:
        traced_two(torch.randn(3), gamma_in=torch.randn(3))
    msg = str(info.value)
    assert "alpha_in" in msg and "beta_in" in msg and "gamma_in" in msg


@pytest.mark.parametrize("bad", [3.0, 2, None, [1.0, 2.0, 3.0], "x"], ids=["float", "int", "None", "list", "str"])
def test_non_tensor_where_tensor_was_traced(traced_two, bad):
    with pytest.raises(TypeError) as info:
        traced_two(torch.randn(3), bad)
    assert "beta_in" in str(info.value)


def test_other_rank_runs_as_eager_when_nothing_reads_the_rank(traced_two):
    # no blanket rank check: an elementwise program runs on any rank, as torch.jit.trace's does
    a, b = torch.randn(3, 2), torch.randn(2)
    assert torch.equal(traced_two(a, b), two_args(a, b))
    with pytest.raises(RuntimeError) as info:   # shapes that do not broadcast: torch's own error, as eager
        traced_two(torch.randn(3, 2), torch.randn(3))
    assert "size of tensor" in str(info.value)


def test_module_call_errors_name_signature():
    class Add(torch.nn.Module):
        def forward(self, left_in, right_in):
            return left_in + right_in

    traced = tracejit.trace(Add(), (torch.randn(2), torch.randn(2)))
    with pytest.raises(TypeError) as info:
        traced(torch.randn(2))
    assert "left_in" in str(info.value) and "right_in" in str(info.value)
    with pytest.raises(TypeError):
        traced(torch.randn(2), 1)
    a, b = torch.randn(2, 2), torch.randn(2)   # another rank: nothing in forward reads it
    assert torch.equal(traced(a, b), a + b)


def pair_sum(pair):
    return pair[0] * pair[1]


def test_tuple_traced_list_passed_raises_type_error():
    traced = tracejit.trace(pair_sum, ((torch.randn(3), torch.randn(3)),))
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(traced((a, b)), pair_sum((a, b)))
    with pytest.raises(TypeError) as info:
        traced([a, b])
    assert "pair" in str(info.value)
    with pytest.raises(TypeError):
        traced((a, b, a))
    with pytest.raises(TypeError):
        traced(a)


def dict_sum(d):
    return d["a"] * d["b"]


def test_dict_missing_keys_raise_type_error_extra_keys_ignored():
    traced = tracejit.trace(dict_sum, ({"a": torch.randn(3), "b": torch.randn(3)},))
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(traced({"a": a, "b": b}), dict_sum({"a": a, "b": b}))
    with pytest.raises(TypeError):
        traced({"a": a, "c": b})
    # an extra key is ignored, as torch.jit's traced programs do (issue 9)
    torch.testing.assert_close(traced({"a": a, "b": b, "c": b}), dict_sum({"a": a, "b": b, "c": b}))
    with pytest.raises(TypeError):
        traced((a, b))


@pytest.mark.parametrize("obj", [3, "abc", None, torch.randn(2)], ids=["int", "str", "None", "tensor"])
def test_tracing_non_callable_raises_type_error(obj):
    with pytest.raises(TypeError):
        tracejit.trace(obj, torch.randn(3))


def test_trace_module_of_non_module_raises_type_error():
    with pytest.raises(TypeError):
        tracejit.trace_module(affine, {"forward": torch.randn(3)})


@pytest.mark.parametrize("example", [(torch.randn(3),), (torch.randn(3),) * 3], ids=["too_few", "too_many"])
def test_example_inputs_that_do_not_fit(example):
    with pytest.raises(TypeError, match="do not fit"):
        tracejit.trace(affine, example)


def test_example_inputs_that_do_not_fit_module():
    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    with pytest.raises(TypeError, match="do not fit"):
        tracejit.trace(Add(), torch.randn(2))
    with pytest.raises(TypeError, match="do not fit"):
        tracejit.trace_module(Add(), {"forward": (torch.randn(2),) * 3})


_BOOM = KeyError("boom")


def raises_key_error(x):
    y = x * 2
    raise _BOOM


def raises_type_error_inside(x):
    # a TypeError from the user's own code is not an "example inputs do not fit" error
    return x + "text"


def raises_shape_error(x):
    return x.view(7, 5)


def disables_grad_then_fails(x):
    torch.set_grad_enabled(False)
    y = x * 2
    raise ValueError(f"bad value {y.shape[0]}")


@pytest.mark.parametrize("fn", [raises_key_error, raises_type_error_inside, raises_shape_error,
                                disables_grad_then_fails], ids=lambda f: f.__name__)
def test_failure_inside_traced_function_propagates_unchanged(fn):
    x = torch.randn(3)
    with pytest.raises(Exception) as eager:
        fn(x.clone())
    torch.set_grad_enabled(True)
    before = snapshot_state()
    with pytest.raises(Exception) as traced:
        tracejit.trace(fn, x)
    assert type(traced.value) is type(eager.value)
    assert str(traced.value) == str(eager.value)
    assert_state_clean(before)


def test_failure_is_the_same_exception_object():
    with pytest.raises(KeyError) as info:
        tracejit.trace(raises_key_error, torch.randn(3))
    assert info.value is _BOOM


def test_failure_inside_module_forward_restores_state():
    class Fails(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x).view(5, 5)

    m = Fails()
    x = torch.randn(2, 3)
    with pytest.raises(RuntimeError) as eager:
        m(x)
    before = snapshot_state()
    with pytest.raises(RuntimeError) as traced:
        tracejit.trace(m, x)
    assert str(traced.value) == str(eager.value)
    assert_state_clean(before)
    with torch.no_grad():
        before = snapshot_state()
        with pytest.raises(RuntimeError):
            tracejit.trace_module(m, {"forward": x})
        assert_state_clean(before)


def test_bad_shape_at_call_raises_torch_runtime_error_unwrapped():
    def mm(x, w):
        return x @ w

    traced = tracejit.trace(mm, (torch.randn(2, 3), torch.randn(3, 4)))
    a, w = torch.randn(2, 3), torch.randn(5, 4)
    with pytest.raises(RuntimeError) as eager:
        mm(a, w)
    with pytest.raises(RuntimeError) as info:
        traced(a, w)
    assert type(info.value) is type(eager.value)
    assert str(info.value) == str(eager.value)


def test_bad_shape_at_call_of_traced_module_raises_torch_runtime_error():
    torch.manual_seed(7)
    m = torch.nn.Linear(4, 2)
    traced = tracejit.trace(m, torch.randn(3, 4))
    bad = torch.randn(3, 5)
    with pytest.raises(RuntimeError) as eager:
        m(bad)
    with pytest.raises(RuntimeError) as info:
        traced(bad)
    assert type(info.value) is type(eager.value)
    assert str(info.value) == str(eager.value)
