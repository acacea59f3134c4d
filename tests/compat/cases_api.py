"""Differential cases: how example inputs, outputs, options, warnings and errors behave (the rows of
issue 9, torch.jit.trace's documentation, and what users hit in GitHub issues about torch.jit.trace)."""
import collections

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import Variable

from harness import Case, Inputs

_in = Inputs(99)
R, I = _in.R, _in.I
Pair = collections.namedtuple("Pair", "a b")


def two(shape_a, shape_b):
    return [tuple(R(*s) for s in shape_a), tuple(R(*s) for s in shape_b)]


# ------------------------------------------------------------------ functions used by the cases
def _dict_out(x):
    return {"y": x * 2, "z": x - 1}


def _list_out(x):
    return [x + 1, x * 3]


def _two_args(a, b):
    return a - b


def _raises_value_error(x):
    raise ValueError("user code refuses")


def _matmul(a, b):
    return a @ b


def _int_frozen(x):
    k = int(x.new_ones(()) * 3)   # a Python int read from a tensor: frozen (here always 3)
    return x * k


def _bool_branch(x):
    if x.abs().sum() >= 0:      # always true: the frozen branch stays right
        return x * 2
    return x


def _float_frozen(x):
    eps = float(x.new_full((), 1e-3))
    return x + eps


def _item_frozen(x):
    return x * x.new_ones(()).mul(2).item()


def _tolist_frozen(x):
    a, b = x.new_ones(2).tolist()
    return x * (a + b)


def _numpy_frozen(x):
    return x * float(x.new_ones(()).numpy())


def _iterate_rows(x):
    total = 0
    for row in x:               # the number of rows is frozen (the new inputs keep it)
        total = total + row
    return total


def _default_arg(x, alpha=0.5):
    return x * alpha


def _nested_list_in(xs):
    return xs[0][0] * xs[1][0] + xs[0][1]


def _repeated_input(a, b):
    return a * 2 + b


def _repeated_output(x):
    y = x.sin()
    return y, y


def _inplace_view(x):
    x.view(-1).add_(1.0)
    return x * 2


def _no_input():
    return torch.arange(5) * 2


def _no_grad_inside(x):
    with torch.no_grad():
        y = x * 2
    return x + y


def _detach_inside(x):
    return x * x.detach()


def _int_ops(a, b):
    return a // b, a % b, (a * b).bitwise_and(7)


def _masked_select(x):
    return x.masked_select(x > 0)


def _nonzero(x):
    return (x > 0).nonzero()


def _is_tracing(x):
    if torch.jit.is_tracing():       # a trace-friendly path computing the same values (torchvision style)
        return x.flatten(0) * 2
    return x.reshape(-1) * 2


def _new_zeros_sizes(x):
    out = x.new_zeros(x.shape[0], x.shape[1] * 2)
    out[:, : x.shape[1]] = x
    return out


def _float_on_long(x):
    return x * 2.5


def _namedtuple_out(x):
    return Pair(x + 1, x * 2)


def _namedtuple_fields(p):
    return p.a * p.b


def _variable(x):
    return Variable(Variable(x) + 1.0)


def _force_outplace_fn(x):
    y = x.clone()
    y.mul_(2).add_(1)
    return y


def _dropout_train(x):
    return F.dropout(x, 0.5, training=True) * 0 + x


def _where_scalar(x):
    return torch.where(x > 0, torch.ones_like(x), torch.zeros_like(x)) + x


def _to_dtype(x):
    return x.to(torch.float64) * 2


def _clone_contig(x):
    return x.t().contiguous().clone()


def _expand_as(x, y):
    return x.expand_as(y) + y


_INNER_FN = None
_INNER_MOD = None


def _inner_fn():
    global _INNER_FN
    if _INNER_FN is None:
        import tracejit
        _INNER_FN = tracejit.trace(lambda x: torch.neg(x) * 2, torch.rand(3, 4))
    return _INNER_FN


def _traced_fn_inside(x):
    return _inner_fn()(x) + 1


class _WithTracedSub(nn.Module):
    """A module whose submodule is a tracejit-traced module (test_call_traced_module_from_traced_module)."""

    def __init__(self):
        super().__init__()
        import tracejit
        torch.manual_seed(3)
        self.sub = tracejit.trace(nn.Linear(4, 5), torch.rand(3, 4))
        self.param = nn.Parameter(torch.rand(5, 2))

    def forward(self, x):
        return torch.mm(self.sub(x), self.param)


def _dot_data(x):
    return x + x.data


def _lhs_index(x):
    x[0, 1] = 4
    return x * 2


CASTS = [("byte", lambda x: x.byte()), ("float", lambda x: x.float()), ("cpu", lambda x: x.cpu()),
         ("to_device", lambda x: x.to(device="cpu")), ("to_int64", lambda x: x.to(dtype=torch.int64)),
         ("to_device_dtype", lambda x: x.to(device="cpu", dtype=torch.float)), ("to_like", lambda x: x.to(x)),
         ("double_half", lambda x: x.double().half())]


def _nested_output(x):
    return torch.nested.as_nested_tensor([x[:2] * 2, x[2:].relu()])


def _zeros_like_grad(x):
    return torch.zeros_like(x) + x ** 2


class _HookedBackward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.lin.register_full_backward_hook(lambda m, gi, go: None)

    def forward(self, x):
        return self.lin(x)


class _DictOutModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        return {"logits": self.lin(x), "hidden": x}


class _KwOnly(nn.Module):
    def forward(self, x, y):
        return x * y


class _TwoInputModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, y):
        return self.lin(x) + y


class _Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x)

    def score(self, x, y):
        return (self.lin(x) * y).sum(-1)


def _m(name, factory, example, new, **kw):
    return Case(name, factory, example, new, module=True, **kw)


CASES = [
    # --- trace-time errors: the class torch raises
    Case("dict_output_strict_is_runtime_error", _dict_out, (R(3),), [(R(4),)], moves=False),
    _m("module_dict_output_strict_is_runtime_error", _DictOutModule, (R(2, 3),), [(R(4, 3),)], moves=False),
    Case("kwarg_examples_not_a_dict", _two_args, None, [(R(3), R(3))], moves=False,
         trace_kwargs={"example_kwarg_inputs": (R(3), R(3))}),
    _m("module_kwarg_examples_not_a_dict", _TwoInputModule, None, [(R(2, 3), R(2, 3))], moves=False,
       trace_kwargs={"example_kwarg_inputs": [R(2, 3), R(2, 3)]}),
    Case("checker_output_mismatch", lambda x: x * 2 if torch.jit.is_tracing() else x * 3, (R(3),), [(R(5),)],
         deliberate="checker-mismatch-raises", refuses=torch.jit.TracingCheckError),
    _m("backward_hook_is_value_error", _HookedBackward, (R(2, 3),), [(R(4, 3),)], moves=False),
    Case("example_too_few_arguments", _two_args, (R(3),), [(R(3), R(3))], moves=False),
    Case("user_error_propagates", _raises_value_error, (R(3),), [(R(3),)], moves=False),
    Case("shape_error_in_trace", _matmul, (R(2, 3), R(4, 5)), [(R(2, 3), R(3, 5))], moves=False),
    # --- call-time errors: torch raises RuntimeError, tracejit an ArgumentTypeError (a RuntimeError)
    Case("call_with_too_many_args", _two_args, (R(3), R(3)), [(R(3), R(3), R(3)), (R(5), R(5))]),
    Case("call_dict_missing_key", lambda d: d["a"] + d["b"], ({"a": R(2), "b": R(2)},),
         [({"a": R(2)},), ({"a": R(4), "b": R(4)},)]),
    Case("call_with_int_for_tensor", _two_args, (R(3), R(3)), [(R(3), 1), (R(2), R(2))]),
    Case("call_with_tuple_of_wrong_length", lambda x, p: x + p[0] * p[1], (R(3), (R(3), R(3))),
         [(R(3), (R(3),)), (R(5), (R(5), R(5)))]),
    # --- TracerWarnings: torch's phrases, one per frozen value (the new inputs keep the frozen values right)
    Case("warn_int_conversion", _int_frozen, (R(3),), [(R(5),), (R(2),)], source="test_trace_warn"),
    Case("warn_bool_branch", _bool_branch, (R(3),), [(R(5),), (R(2),)], source="data-dependent if"),
    Case("warn_float_conversion", _float_frozen, (R(3),), [(R(5),), (R(2),)]),
    Case("warn_item", _item_frozen, (R(3),), [(R(5),), (R(2),)], source="loss.item() in forward"),
    Case("warn_tolist", _tolist_frozen, (R(3),), [(R(5),), (R(2),)]),
    Case("warn_numpy", _numpy_frozen, (R(3),), [(R(5),), (R(2),)]),
    Case("warn_iteration", _iterate_rows, (R(3, 4),), [(R(3, 6),), (R(3, 1),)]),
    Case("list_output_warns_when_strict", _list_out, (R(3),), [(R(5),), (R(1),)]),
    Case("list_output_strict_false", _list_out, (R(3),), [(R(5),), (R(1),)], trace_kwargs={"strict": False}),
    Case("dict_output_strict_false", _dict_out, (R(3),), [(R(5),), (R(1),)], trace_kwargs={"strict": False},
         source="test_trace_dict_output"),
    _m("module_dict_output_strict_false", _DictOutModule, (R(2, 3),), [(R(4, 3),), (R(1, 3),)],
       trace_kwargs={"strict": False}, source="transformers return_dict outputs"),
    Case("check_trace_false_dropout_no_warning", _dropout_train, (R(3),), [(R(5),), (R(1),)],
         trace_kwargs={"check_trace": False}),
    Case("check_inputs_pass", _two_args, (R(3), R(3)), two([(4,), (4,)], [(2,), (2,)]),
         trace_kwargs={"check_inputs": [(R(6), R(6)), (R(1), R(1))]}),
    Case("check_inputs_control_flow_fails", _iterate_rows, (R(3, 4),), [(R(3, 4),)], moves=False,
         trace_kwargs={"check_inputs": [(R(5, 4),)]}, source="test_trace_checker_control_flow"),
    # --- example inputs: tuples, lists, namedtuples, keywords
    Case("namedtuple_example_spreads", _two_args, Pair(R(3), R(3)), two([(4,), (4,)], [(2,), (2,)]),
         source="torch.jit.trace: a tuple of example inputs"),
    Case("namedtuple_argument", _namedtuple_fields, (Pair(R(3), R(3)),), [(Pair(R(5), R(5)),), (Pair(R(1), R(1)),)],
         deliberate="namedtuple-kept"),
    Case("namedtuple_output", _namedtuple_out, (R(3),), [(R(5),), (R(1),)], deliberate="namedtuple-kept"),
    Case("default_argument_kept", _default_arg, (R(3),), [(R(5),), (R(2),)]),
    Case("nested_list_argument", _nested_list_in, ([[R(2), R(2)], [R(2)]],),
         [([[R(4), R(4)], [R(4)]],), ([[R(1), R(1)], [R(1)]],)]),
    Case("kwarg_examples_function", _two_args, None, [(R(4), R(4)), (R(1), R(1))],
         trace_kwargs={"example_kwarg_inputs": {"b": R(3), "a": R(3)}}, source="issue 9"),
    _m("kwarg_examples_module_by_keyword", _KwOnly, None, [(), ()],
       trace_kwargs={"example_kwarg_inputs": {"y": R(3), "x": R(3)}},
       call_kwargs=[{"x": R(4), "y": R(4)}, {"y": R(2), "x": R(2)}]),
    _m("two_input_module", _TwoInputModule, (R(2, 3), R(2, 3)), [(R(4, 3), R(4, 3)), (R(1, 3), R(1, 3))],
       grad=True),
    Case("repeated_input", _repeated_input, (lambda t: (t, t))(R(3)), two([(4,), (4,)], [(2,), (2,)]),
         source="test_repeated_input"),
    Case("repeated_output", _repeated_output, (R(3),), [(R(5),), (R(1),)], source="test_repeated_output"),
    Case("no_inputs", _no_input, (), [(), ()], moves=False, source="test_trace_optioanl_dtype"),
    # --- semantics users rely on
    Case("inplace_on_view_of_input", _inplace_view, (R(2, 3),), [(R(4, 2),), (R(1, 5),)],
         source="test_inplace_check"),
    Case("force_outplace", _force_outplace_fn, (R(3),), [(R(5),), (R(1),)], trace_kwargs={"_force_outplace": True}),
    Case("no_grad_block", _no_grad_inside, (R(3),), [(R(5),), (R(1),)], grad=True, deliberate="grad-mode-regions"),
    Case("detach_inside", _detach_inside, (R(3),), [(R(5),), (R(1),)], grad=True),
    Case("zeros_like_grad", _zeros_like_grad, (R(3),), [(R(5),), (R(1),)], grad=True),
    Case("integer_ops", _int_ops, (I(9, 4) + 1, I(3, 4) + 1), [(I(50, 6) + 1, I(7, 6) + 1), (I(5, 1) + 1, I(2, 1) + 1)]),
    Case("masked_select_dynamic_length", _masked_select, (R(6),), [(R(9),), (R(2),)]),
    Case("nonzero_dynamic_length", _nonzero, (R(3, 4),), [(R(5, 2),), (R(1, 7),)]),
    Case("is_tracing_branch", _is_tracing, (R(3),), [(R(5),), (R(1),)], source="torchvision is_tracing branches"),
    Case("new_zeros_from_shape", _new_zeros_sizes, (R(2, 3),), [(R(4, 1),), (R(1, 5),)]),
    Case("float_math_on_long_input", _float_on_long, (R(3),), [(I(9, 4),), (R(2).double(),)]),
    Case("other_dtype_input", _to_dtype, (R(3),), [(R(4).double(),), (R(2).half().float(),)]),
    Case("variable_legacy_constructor", _variable, (R(3, 4),), [(R(5, 6),), (R(1, 2),)],
         source="test_trace_variable_instantiation"),
    Case("where_with_like_tensors", _where_scalar, (R(3),), [(R(5),), (R(1),)], grad=True),
    Case("transpose_contiguous_clone", _clone_contig, (R(2, 3),), [(R(4, 5),), (R(1, 1),)]),
    *[Case(f"casts_{n}", f, ((R(2, 2) * 10),), [(R(3, 4) * 10,), (R(1, 5) * 10,)], source="test_trace_casts")
      for n, f in CASTS],
    Case("traced_function_inside_trace", _traced_fn_inside, (R(3, 4),), [(R(5, 2),), (R(1, 1),)],
         source="test_call_traced_fn_from_traced_module"),
    _m("traced_module_as_submodule", _WithTracedSub, (R(3, 4),), [(R(6, 4),), (R(1, 4),)],
       source="test_call_traced_module_from_traced_module"),
    Case("dot_data_alias", _dot_data, (R(3, 4),), [(R(5, 6),), (R(1, 2),)], trace_kwargs={"check_inputs": [(R(3, 4),)]},
         deliberate="dot-data-alias", source="test_trace_checker_dot_data"),
    Case("force_outplace_lhs_index", _lhs_index, (R(3, 4),), [(R(5, 6),), (R(2, 2),)],
         trace_kwargs={"_force_outplace": True}, deliberate="outplace-setitem", source="test_lhs_index_fails"),
    Case("trace_other_bound_method", lambda: _Scorer().score, (R(2, 3), R(2, 3)), two([(4, 3), (4, 3)], [(1, 3),
                                                                                                       (1, 3)]),
         module=True, deliberate="method-trace", source="torch.jit.trace_module docs (trace(n.weighted_kernel_sum))"),
    Case("nested_tensor_output", _nested_output, (R(5, 3),), [(R(6, 3),), (R(3, 2),)],
         source="test_trace_with_nested_strided_tensor_output"),
    Case("expand_as_other", _expand_as, (R(1, 3), R(2, 3)), two([(1, 4), (5, 4)], [(1, 1), (3, 1)])),
]
