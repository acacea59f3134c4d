"""Patterns for the boundary rule (issue #20): Python values that leave the recorded world.

Each ``Case`` is traced on ``example`` and called on ``new`` inputs that take another path in
eager. The line whose guard must fail is marked ``# @<case name>``. Rows of the issue's table:
a tensor becoming a Python value by a path other than ``item()`` / ``bool()``; tensor metadata
read in Python; a traced size escaping into a plain int; NaN and signed zeros in value guards.
Sources: transformers (pad-token checks, ``_ignore_causal_mask_sdpa``-style ``.all()`` checks,
gradient checkpointing's ``requires_grad`` test, f-string keyed ``ModuleDict`` heads), timm /
torchvision (stride / contiguity fast paths, power-of-two padding with ``bit_length``), research
code (``np.linspace`` schedules, ``lru_cache``d plans keyed by a shape, ``str(t)`` NaN checks),
and attacks on the rule (every ``int`` method, reflected bit operations, ``operator.index``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Case:
    name: str
    fn: object
    example: tuple
    new: list
    at_line: bool = True          # a loaded program's GuardError names the marked line (else: an input check)
    tol: float = 1e-5
    extra: dict = field(default_factory=dict)


def r(*shape):
    return torch.randn(*shape)


def t(*values):
    return torch.tensor(values)


# ---- a tensor becomes a Python value by another path than item() / bool() ------------------------
def contains_pad(ids):
    if 0 in ids:  # @contains_pad
        return ids * 2
    return ids + 1


def pad_in_last_column(ids):
    """transformers' sequence classification: is the pad token in the last column?"""
    pad = 0
    if pad in ids[:, -1]:  # @pad_in_last_column
        return (ids != pad).sum(-1) - 1
    return torch.full((ids.size(0),), ids.size(1) - 1)


def fstring_value_key(x):
    scales = {"1": 1.0, "2": 2.0, "3": 3.0}
    key = f"{x.max():.0f}"  # @fstring_value_key
    return x * scales.get(key, -1.0)


def str_nan_check(x):
    if "nan" in str(x):  # @str_nan_check
        return torch.nan_to_num(x)
    return x * 2


def repr_mode(x, mode):
    if repr(mode) == "tensor(1)":  # @repr_mode
        return x + 1
    return x - 1


def numpy_asarray(x):
    return x * float(np.asarray(x).max())  # @numpy_asarray


def numpy_method_argmax(x):
    i = int(x.numpy().argmax())  # @numpy_method_argmax
    return x[i] * 2


def allclose_tied(a, b):
    if torch.allclose(a, b):  # @allclose_tied
        return a * 2
    return a + b


def allclose_atol(a, b):
    if torch.allclose(a, b, atol=0.5):  # @allclose_atol
        return a
    return b


def tensor_allclose_method(a, b):
    if a.allclose(b):  # @tensor_allclose_method
        return a
    return a - b


def equal_causal(mask):
    if torch.equal(mask, mask.tril()):  # @equal_causal
        return mask.float() * 2
    return mask.float()


def is_same_size_skip(x, skip):
    if x.is_same_size(skip):  # @is_same_size_skip
        return x + skip
    return x


def all_ones_mask(x, mask):
    """transformers' _ignore_causal_mask_sdpa: an all-ones padding mask is dropped."""
    if (mask == 1).all():  # @all_ones_mask
        return x.softmax(-1)
    return x.masked_fill(mask == 0, -1e9).softmax(-1)


def nan_guard_any(x):
    if torch.isnan(x).any():  # @nan_guard_any
        return torch.nan_to_num(x, nan=0.0)
    return x + 1


def format_zero_dim(x):
    s = format(x.sum(), ".1f")  # @format_zero_dim
    return x * len(s)


def isclose_scalar_all(a, b):
    if torch.isclose(a, b).all():  # @isclose_scalar_all
        return a
    return a * 0


# ---- NaN and signed zeros in value guards ---------------------------------------------------------
def item_nan_branch(x):
    v = x.max().item()  # @item_nan_branch
    if v != v:
        return torch.zeros_like(x)
    return x * 2


def item_copysign(x):
    s = x.min().item()  # @item_copysign
    return x + math.copysign(1.0, s)


def item_nan_sign(x):                     # found by the long grammar run: min() of [-2, nan] is a NaN with its sign set
    s = x.min().item()  # @item_nan_sign
    return x + math.copysign(1.0, s)


def item_reciprocal(x):
    s = x.min().item()  # @item_reciprocal
    return x * (1.0 / s if s else math.copysign(1.0, s))


def tolist_nan(x):
    first = x.tolist()[0]  # @tolist_nan
    return x * (0.0 if math.isnan(first) else 1.0)


def float_signed_zero(x):
    s = float(x.min())  # @float_signed_zero
    return x + math.atan2(s, -1.0)


# ---- tensor metadata read in Python ---------------------------------------------------------------
def contiguous_fast_path(x):
    if x.is_contiguous():  # @contiguous_fast_path
        return x.view(-1)[: x.size(1)] * 2
    return x.reshape(-1)[: x.size(1)]


def stride_last(x):
    if x.stride(-1) != 1:  # @stride_last
        return x.contiguous() * 2
    return x


def stride_tuple(x):
    return x * x.stride()[0]  # @stride_tuple


def storage_offset_scale(x):
    return x * (x.storage_offset() + 1)  # @storage_offset_scale


def requires_grad_checkpoint(x):
    """transformers: ``if self.gradient_checkpointing and hidden_states.requires_grad``."""
    if x.requires_grad:  # @requires_grad_checkpoint
        return x * 2
    return x * 3


def grad_fn_none(x):
    if x.grad_fn is None:  # @grad_fn_none
        return x + 1
    return x - 1


def is_leaf_branch(x):
    if x.is_leaf:  # @is_leaf_branch
        return x + 1
    return x - 1


def version_counter(x):
    return x * (1 + x._version)  # @version_counter


def nbytes_chunk(x):
    if x.nbytes > 32:  # @nbytes_chunk
        return x * 2
    return x


def torch_numel_branch(x):
    if torch.numel(x) > 8:  # @torch_numel_branch
        return x.flatten() * 2
    return x.flatten()


def is_inference_branch(x):
    if x.is_inference():  # @is_inference_branch
        return x + 1
    return x - 1


class MyTensor(torch.Tensor):
    pass


def isinstance_subclass(x):
    if isinstance(x, MyTensor):
        return x.as_subclass(torch.Tensor) * 2
    return x + 1


def _with_scale(x):
    x.scale = 3.0
    return x


def python_attribute(x):
    return x * getattr(x, "scale", 1.0)


from boundary_number_patterns import (  # noqa: E402  (part 2: traced sizes escaping into plain ints)
    GetattrByWidth, HeadsByWidth, as_integer_ratio, bit_count_power_of_two, bit_length_bucket, copy_of_size,
    explicit_index_call, float_of_traced_float, format_width, hash_of_size, int_of_real, invert_size, list_repeat,
    lru_cache_int_key, lru_cache_plan, np_linspace_schedule,
    operator_index_repeat, parity_and, reflected_and, reflected_divmod, reflected_lshift, repr_of_size,
    size_conjugate, size_dict_get, size_dict_key_in, size_in_set, size_sizeof, str_repeat, to_bytes_key,
    traced_float_hash, traced_float_hex, traced_float_is_integer, traced_float_str)
from boundary_numpy_patterns import (  # noqa: E402  (part 3: traced sizes handed to numpy)
    numpy_arange, numpy_array_times_size, numpy_fft_freq, numpy_full, numpy_hanning_window, numpy_linspace_kwarg,
    numpy_log2_pad, numpy_nested_list, numpy_pad_width_kwarg, numpy_prod_shape, numpy_seeded_rng,
    numpy_sqrt_scale, numpy_tril_mask, numpy_ufunc_traced_float, numpy_zeros_shape)
from boundary_numpy_patterns import (  # noqa: E402  (part 4: the numpy gaps of issue #20)
    numpy_asarray_item, numpy_asarray_sum, numpy_asarray_tolist, numpy_bound_linspace, numpy_bound_zeros,
    numpy_fft_length, numpy_fft_of_values, numpy_float32_size, numpy_float32_tensor, numpy_int64_size,
    numpy_ma_masked, numpy_method_chained, numpy_method_repeat, numpy_method_reshape, numpy_method_take,
    numpy_polynomial_class, numpy_polyval_size, numpy_scalar_method)

from boundary_receiver_patterns import (  # noqa: E402  (part 5: numpy methods reached through any expression)
    NumpyAttributeChain, numpy_comprehension_receiver, numpy_dict_receiver, numpy_getattr_receiver,
    numpy_helper_result_receiver, numpy_lambda_receiver, numpy_repeat_in_subscript, numpy_subscript_receiver)

import boundary_real_patterns as real  # noqa: E402  (part 6: Python-side reads of real forward code)


CASES = [
    Case("contains_pad", contains_pad, (t(1, 2, 3),), [(t(0, 2, 3),), (t(4, 5, 6),)]),
    Case("pad_in_last_column", pad_in_last_column, (torch.tensor([[3, 4, 5], [1, 2, 6]]),),
         [(torch.tensor([[3, 4, 0], [1, 2, 0]]),)]),
    Case("fstring_value_key", fstring_value_key, (t(0.5, 1.2),), [(t(2.2, 0.1),), (t(2.9, 0.1),)]),
    Case("str_nan_check", str_nan_check, (t(1.0, 2.0),), [(t(1.0, float("nan")),)]),
    Case("repr_mode", repr_mode, (r(3), torch.tensor(1)), [(r(3), torch.tensor(2))]),
    Case("numpy_asarray", numpy_asarray, (t(1.0, 2.0),), [(t(3.0, 2.0),)]),
    Case("numpy_method_argmax", numpy_method_argmax, (t(5.0, 1.0, 2.0),), [(t(1.0, 5.0, 2.0),)]),
    Case("allclose_tied", allclose_tied, (t(1.0, 2.0), t(1.0, 2.0)), [(t(1.0, 2.0), t(1.0, 3.0))]),
    Case("allclose_atol", allclose_atol, (t(1.0, 2.0), t(1.2, 2.0)), [(t(1.0, 2.0), t(2.0, 2.0))]),
    Case("tensor_allclose_method", tensor_allclose_method, (t(1.0), t(1.0)), [(t(1.0), t(3.0))]),
    Case("equal_causal", equal_causal, (torch.ones(3, 3).tril(),), [(torch.ones(3, 3),)]),
    Case("is_same_size_skip", is_same_size_skip, (r(2, 3), r(2, 3)), [(r(2, 3), r(1, 3))]),
    Case("all_ones_mask", all_ones_mask, (r(2, 4), torch.ones(2, 4)),
         [(r(2, 4), torch.tensor([[1., 1., 0., 0.], [1., 1., 1., 1.]]))]),
    Case("nan_guard_any", nan_guard_any, (t(1.0, 2.0),), [(t(float("nan"), 2.0),)]),
    Case("format_zero_dim", format_zero_dim, (t(1.0, 2.0),), [(t(100.0, 200.0),)]),
    Case("isclose_scalar_all", isclose_scalar_all, (t(1.0, 2.0), t(1.0, 2.0)), [(t(1.0, 2.0), t(0.0, 2.0))]),
    Case("item_nan_branch", item_nan_branch, (t(float("nan"), 1.0),), [(t(1.0, 2.0),)]),
    Case("item_copysign", item_copysign, (t(-0.0, -0.0),), [(t(0.0, 0.0),), (t(1.0, 2.0),)]),
    Case("item_nan_sign", item_nan_sign, (t(float("nan")),), [(t(-2.0, float("nan")),)]),
    Case("item_reciprocal", item_reciprocal, (t(0.0, 1.0),), [(t(-0.0, 1.0),), (t(2.0, 4.0),)]),
    Case("tolist_nan", tolist_nan, (t(float("nan"), 1.0),), [(t(1.0, 1.0),)]),
    Case("float_signed_zero", float_signed_zero, (t(0.0),), [(t(-0.0),)]),
    Case("contiguous_fast_path", contiguous_fast_path, (r(2, 3),), [(r(3, 2).t(),)]),
    Case("stride_last", stride_last, (r(2, 3),), [(r(3, 2).t(),)]),
    Case("stride_tuple", stride_tuple, (r(2, 3),), [(r(3, 2).t(),)]),
    Case("storage_offset_scale", storage_offset_scale, (r(2, 3),), [(r(3, 3)[1:],)]),
    Case("requires_grad_checkpoint", requires_grad_checkpoint, (r(3),), [(r(3).requires_grad_(),)]),
    Case("grad_fn_none", grad_fn_none, (r(3),), [(r(3).requires_grad_() * 1,)]),
    Case("is_leaf_branch", is_leaf_branch, (r(3),), [(r(3).requires_grad_() * 1,)]),
    Case("version_counter", version_counter, (torch.ones(3),), [(torch.ones(3).add_(0),)]),
    Case("nbytes_chunk", nbytes_chunk, (r(4),), [(r(16),), (r(4).double(),)]),
    Case("torch_numel_branch", torch_numel_branch, (r(2, 3),), [(r(3, 3),)]),
    Case("is_inference_branch", is_inference_branch, (r(3),), [(torch.inference_mode()(lambda: r(3))(),)]),
    Case("isinstance_subclass", isinstance_subclass, (r(3),), [(r(3).as_subclass(MyTensor),)], at_line=False),
    Case("python_attribute", python_attribute, (r(3),), [(_with_scale(r(3)),)], at_line=False),
    Case("bit_length_bucket", bit_length_bucket, (r(4),), [(r(5),), (r(9),)]),
    Case("operator_index_repeat", operator_index_repeat, (r(4),), [(r(5),)]),
    Case("list_repeat", list_repeat, (r(4),), [(r(5),)]),
    Case("str_repeat", str_repeat, (r(4),), [(r(5),)]),
    Case("invert_size", invert_size, (r(4),), [(r(5),)]),
    Case("size_in_set", size_in_set, (r(3),), [(r(4),), (r(8),)]),
    Case("size_dict_get", size_dict_get, (r(3),), [(r(4),), (r(8),)]),
    Case("size_dict_key_in", size_dict_key_in, (r(2, 3),), [(r(2, 5),)]),
    Case("heads_by_width", HeadsByWidth, (r(2, 3),), [(r(2, 5),)]),
    Case("getattr_by_width", GetattrByWidth, (r(2, 3),), [(r(2, 5),)]),
    Case("lru_cache_plan", lru_cache_plan, (r(2, 3),), [(r(12, 3),)]),
    Case("lru_cache_int_key", lru_cache_int_key, (r(2),), [(r(4),)]),
    Case("np_linspace_schedule", np_linspace_schedule, (r(3, 2),), [(r(5, 2),)]),
    Case("to_bytes_key", to_bytes_key, (r(3),), [(r(5),)]),
    Case("parity_and", parity_and, (r(3),), [(r(4),)]),
    Case("reflected_lshift", reflected_lshift, (r(3),), [(r(4),)]),
    Case("reflected_and", reflected_and, (r(3),), [(r(4),)]),
    Case("reflected_divmod", reflected_divmod, (r(3),), [(r(5),)]),
    Case("hash_of_size", hash_of_size, (r(3),), [(r(4),)]),
    Case("as_integer_ratio", as_integer_ratio, (r(3),), [(r(4),)]),
    Case("bit_count_power_of_two", bit_count_power_of_two, (r(3),), [(r(4),)]),
    Case("format_width", format_width, (r(3),), [(r(4),)]),
    Case("repr_of_size", repr_of_size, (r(3),), [(r(12),)]),
    Case("size_sizeof", size_sizeof, (r(3),), [(r(1024),)]),
    Case("float_of_traced_float", float_of_traced_float, (r(3),), [(r(5),)]),
    Case("traced_float_hex", traced_float_hex, (r(3),), [(r(4),)]),
    Case("traced_float_is_integer", traced_float_is_integer, (r(3),), [(r(4),)]),
    Case("traced_float_hash", traced_float_hash, (r(3),), [(r(4),)]),
    Case("traced_float_str", traced_float_str, (r(2),), [(r(3),)]),
    Case("explicit_index_call", explicit_index_call, (r(3),), [(r(4),)]),
    Case("copy_of_size", copy_of_size, (r(3),), [(r(4),)]),
]

# traced sizes handed to numpy (trace/numpy_reads.py): guarded at the line that calls numpy
CASES += [
    Case("numpy_arange", numpy_arange, (r(3),), [(r(4),)]),
    Case("numpy_zeros_shape", numpy_zeros_shape, (r(3),), [(r(4),)]),
    Case("numpy_full", numpy_full, (r(3),), [(r(4),)]),
    Case("numpy_linspace_kwarg", numpy_linspace_kwarg, (r(2, 3),), [(r(2, 5),)]),
    Case("numpy_prod_shape", numpy_prod_shape, (r(2, 3),), [(r(3, 3),)]),
    Case("numpy_sqrt_scale", numpy_sqrt_scale, (r(2, 4),), [(r(2, 9),)]),
    Case("numpy_log2_pad", numpy_log2_pad, (r(3),), [(r(5),)]),
    Case("numpy_ufunc_traced_float", numpy_ufunc_traced_float, (r(3),), [(r(5),)]),
    Case("numpy_array_times_size", numpy_array_times_size, (r(3),), [(r(4),)]),
    Case("numpy_seeded_rng", numpy_seeded_rng, (r(3),), [(r(4),)]),
    Case("numpy_tril_mask", numpy_tril_mask, (r(2, 3),), [(r(2, 4),)]),
    Case("numpy_hanning_window", numpy_hanning_window, (r(2, 4),), [(r(2, 6),)]),
    Case("numpy_fft_freq", numpy_fft_freq, (r(2, 4),), [(r(2, 6),)]),
    Case("numpy_nested_list", numpy_nested_list, (r(3),), [(r(4),)]),
    Case("numpy_pad_width_kwarg", numpy_pad_width_kwarg, (r(3),), [(r(4),)]),
    Case("numpy_method_reshape", numpy_method_reshape, (r(4),), [(r(6),)]),
    Case("numpy_method_chained", numpy_method_chained, (r(4),), [(r(6),)]),
    Case("numpy_method_repeat", numpy_method_repeat, (r(3),), [(r(5),)]),
    Case("numpy_method_take", numpy_method_take, (r(3),), [(r(5),)]),
    Case("numpy_scalar_method", numpy_scalar_method, (r(3),), [(r(5),)]),
    Case("numpy_bound_zeros", numpy_bound_zeros, (r(3),), [(r(5),)]),
    Case("numpy_bound_linspace", numpy_bound_linspace, (r(3),), [(r(5),)]),
    Case("numpy_float32_size", numpy_float32_size, (r(3),), [(r(5),)]),
    Case("numpy_int64_size", numpy_int64_size, (r(3),), [(r(5),)]),
    Case("numpy_float32_tensor", numpy_float32_tensor, (t(1.0, 2.0),), [(t(3.0, 2.0),)]),
    Case("numpy_asarray_sum", numpy_asarray_sum, (t(1.0, 2.0),), [(t(3.0, 2.0),)]),
    Case("numpy_asarray_tolist", numpy_asarray_tolist, (t(1.0, 2.0),), [(t(3.0, 2.0),)]),
    Case("numpy_asarray_item", numpy_asarray_item, (t(1.0, 2.0),), [(t(3.0, 2.0),)]),
    Case("numpy_ma_masked", numpy_ma_masked, (r(3),), [(r(5),)]),
    Case("numpy_polyval_size", numpy_polyval_size, (r(3),), [(r(5),)]),
    Case("numpy_polynomial_class", numpy_polynomial_class, (r(3),), [(r(5),)]),
    Case("numpy_fft_of_values", numpy_fft_of_values, (t(1.0, 2.0),), [(t(3.0, 2.0),)]),
    Case("numpy_fft_length", numpy_fft_length, (r(3),), [(r(5),)]),
    Case("numpy_subscript_receiver", numpy_subscript_receiver, (r(2),), [(r(4),)]),
    Case("numpy_dict_receiver", numpy_dict_receiver, (r(2),), [(r(4),)]),
    Case("numpy_attribute_chain", NumpyAttributeChain, (r(2),), [(r(4),)]),
    Case("numpy_helper_result_receiver", numpy_helper_result_receiver, (r(2),), [(r(4),)]),
    Case("numpy_comprehension_receiver", numpy_comprehension_receiver, (r(2),), [(r(4),)]),
    Case("numpy_lambda_receiver", numpy_lambda_receiver, (r(2),), [(r(4),)]),
    Case("numpy_getattr_receiver", numpy_getattr_receiver, (r(2),), [(r(4),)]),
    Case("numpy_repeat_in_subscript", numpy_repeat_in_subscript, (r(3),), [(r(5),)]),
]

t2 = torch.tensor
CASES += [Case(name, getattr(real, name), ex, new, **kw) for name, ex, new, kw in [
    ("tolist_sign", (t(1.0, 2.0),), [(t(-3.0, 1.0),)], {}),
    ("any_row_positive", (t2([[1.0, 2.0], [3.0, 4.0]]),), [(t2([[-1.0, -2.0], [-3.0, -4.0]]),)], {}),
    ("len_loop", (r(2, 3),), [(r(4, 3),)], {}),
    ("argmax_table", (t(3.0, 1.0, 0.0),), [(t(0.0, 1.0, 3.0),)], {}),
    ("nan_cleanup", (t(1.0, 2.0),), [(t(float("nan"), 2.0),)], {}),
    ("sorted_sides", (r(2, 3),), [(r(4, 1),)], {}),
    ("shape_equals_list", (r(2, 3),), [(r(3, 3),)], {}),
    ("divmod_halves", (r(4),), [(r(5),)], {}),
    ("enumerate_rows", (r(2, 3),), [(r(4, 3),)], {}),
    ("broadcast_check", (r(2, 3), r(2, 3)), [(r(2, 3), r(2, 4))], {}),
    ("empty_shortcut", (r(2, 3),), [(r(0, 3),)], {}),
    ("pad_to_multiple", (r(2, 4),), [(r(2, 5),)], {}),
    ("item_ratio", (t(1.0, 2.0),), [(t(5.0, 2.0),)], {}),
    ("isclose_item", (t(0.1, -0.1),), [(t(3.0, 4.0),)], {}),
    ("rounded_max", (t(1.2, 0.0),), [(t(3.4, 0.0),)], {}),
    ("percent_format_key", (t(1.2, 0.0),), [(t(123.4, 0.0),)], {}),
    ("split_by_lengths", (r(5), t2([2, 3])), [(r(5), t2([1, 4]))], {}),
    ("has_feature_dims", (r(2, 3),), [(r(4),)], {}),
    ("dtype_name_key", (r(3),), [(r(3).double(),)], {}),
    ("ndim_branch", (r(2, 3),), [(r(2, 3, 4),)], {}),
    ("floating_branch", (r(3),), [(t2([1, 2, 3]),)], {}),
]]

# identity-like int methods: recorded, so new sizes replay without any guard
REPLAYS = [Case(name, getattr(real, name), ex, new) for name, ex, new in [
    ("prod_of_shape", (r(2, 3),), [(r(3, 3),)]), ("finfo_min_mask", (r(3),), [(r(4).double(),)]),
    ("min_with_cap", (r(3),), [(r(6),)]), ("ceil_division", (r(3),), [(r(7),)]), ("log_size", (r(2),), [(r(5),)]),
    ("scripting_branch", (r(3),), [(r(4),)]), ("compiling_branch", (r(3),), [(r(4),)]),
    ("square_pad", (r(1, 2, 3),), [(r(1, 4, 2),)])]]   # max() of the shape: one sym_math max
REPLAYS += [
    Case("size_conjugate", size_conjugate, (r(2, 3),), [(r(4, 3),)]),
    Case("int_of_real", int_of_real, (r(2, 3),), [(r(4, 3),)]),
]


# ---- refused at trace time: no call-time guard can check these -------------------------------------
def storage_address(x):
    base = x.untyped_storage()  # @storage_address
    return x * (base.nbytes() > 8)


def alias_check(a, b):
    if a.data_ptr() == b.data_ptr():  # @alias_check
        return a * 3
    return a + b


def shared_memory_branch(x):
    """a DataLoader worker's batch lives in shared memory: torch's is_shared() reads a storage handle"""
    if x.is_shared():  # @shared_memory_branch
        return x.clone()
    return x * 2


REFUSALS = [
    Case("storage_address", storage_address, (r(3),), []),
    Case("alias_check", alias_check, (r(3), r(3)), []),
    Case("shared_memory_branch", shared_memory_branch, (r(3),), []),
]
