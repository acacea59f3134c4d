"""The one reviewed table of ATen op facts that torch's tags and schemas do not give (ops/aten.py reads it).

OVERRIDES: (bare op name, fact) -> (value, reason); ``_listed`` writes one entry per op of a group that
shares its reason. Facts:
  "unmergeable"  two calls with equal arguments may return different values, though ATen tags no randomness
  "fresh"        every call returns new memory, though ATen tags the op neither pointwise nor reduction
                 (composite and matmul-family ops: ops.is_fresh)
  "pointwise"    ATen leaves the pointwise tag off an elementwise op (ops.is_pointwise)
  "layout_free"  its values ignore its inputs' strides, though ATen tags it neither pointwise nor reduction
                 (ops.is_layout_free, read by passes/conv_layout.py)
  "outgrows"     the result's size comes from the op's arguments (a size, repeats, another tensor's shape),
                 not from its tensor inputs' values: it can be larger than all of them (ops.outgrows_inputs)
  "data_dependent"  the result's shape depends on its inputs' values, though ATen tags the op no
                 ``dynamic_output_shape`` (the value: the overloads it holds for; ops.has_data_dependent_shape)
  "numbers_as_tensors"  a saved call may hold a Python number where the recorded overload's schema says
                 Tensor (ops.takes_numbers_for_tensors, read by the loader's schema check)
  "steps"        its result jumps where its input crosses a boundary (ops.steps; passes/decisions.py)
  "metadata_only"  its result follows its (first) tensor input's shape, dtype or device, not its values
                 (ops.reads_metadata_only; passes/decisions.py)
  "like_second"  it reads only the shape or dtype of its second tensor argument (ops.reads_values_of)
  "step_work"    its kernel's cost per element, in multiply-adds of a blocked matrix product (ops.step_work), where
                 it is above the default ops/aten.py gives every op (a call of a program loaded from a file counts
                 it against its total: support/call_budget.py). Measured on one core with torch 2.13 (round 26:
                 ns per element x 5.4e10 multiply-adds/s); an op not listed here takes the default.
STRING_ARGUMENTS: the closed vocabularies of arguments ATen's schemas type only as ``str``.
RANDOM_SWITCHES: the arguments that turn a seeded op's draws off ("true": drawn only when truthy,
"nonzero": only when not 0), read by ops.draws_random against each op's schema.
"""
from __future__ import annotations

_UNINITIALIZED = "returns uninitialized memory: two calls are two different tensors (CSE must not merge them)"
_TRAIN = "draws only in training (its `train` argument) and with a nonzero dropout probability"
_BINDING = ("torch's Python binding takes a number for its Tensor operand (python_arg_parser's "
            "should_allow_numbers_as_tensors)")
_SCALAR_TWIN = "a Scalar overload stands beside the Tensor one the call is recorded under (eq.Scalar / eq.Tensor)"
_LOADER = ("accepted by the loader since numbers were first allowed (commit 7c35f59); eager's torch.<op> binding "
           "refuses a number here (TypeError at the call), so a file can make the call fail, not misbehave")
_UNTAGGED = ("elementwise (each result element from the same-index input elements, computed by pointwise "
             "kernels), but ATen's schema carries no pointwise tag")
_UNTAGGED_2_11 = ("elementwise; torch 2.11's schema leaves the pointwise tag off (2.12 and later tag it): the "
                  "fact must not depend on the torch version")
_SIZED = ("its result is sized by its arguments (broadcast, repeat, factory): constant folding would store "
          "more data than it saves; ATen states no such fact (the tags have no 'factory' / 'broadcast'), and "
          "deriving it by result size would stop folding cat and low-rank products (W + A @ B)")
_STRIDES = ("computes by index whatever its input's strides (oneDNN and ATen's CPU kernels take channels-last "
            "input), so a channels-last feature map gives eager's values; no ATen tag says so")
_SHAPE = "reads or rearranges a tensor's shape, not its memory order (a channels-last view: conv_layout.py checks)"
_INFERENCE = ("identity in an inference program (eval mode), the only kind conv_layout rewrites; in training its "
              "mask would follow memory order")
_NONZERO = ("a composite op that calls nonzero (``torch.where(cond)`` is ``cond.nonzero(as_tuple=True)``): its "
            "results' length is the count of true elements, but only nonzero itself carries ATen's "
            "dynamic_output_shape tag (``where.self``, the three-argument where, is elementwise)")
_ALLOCATES = ("computes its result into a tensor it allocates (a matmul / convolution / normalization / "
              "softmax / concatenation / pooling / padding): never its input or a view of it, for any arguments")


_STEPS = ("rounds, or jumps at multiples of its divisor or at zero: an input moved by one ulp across such a point "
          "moves the result by a whole step (no ATen tag says so)")
_METADATA = ("its result is its input's size, rank or strides, or a new tensor shaped / typed like it: the input's "
             "values never reach it (no ATen tag says so)")
_LIKE_SECOND = "x.<op>(other) takes other's shape (or dtype) only; x's values carry"
_REPEATS = ("its list of dims may name one twice (a shift applied twice); every other op's kernel refuses that "
            "(\"dim 1 appears multiple times\", \"FFT dims must be unique\"): checked against ATen, round 22")
_SPECIAL = ("a special function evaluated by series or recurrences per element: measured 8,000 to 27,000 "
            "multiply-adds' time per element (polygamma 174-535 ns, zeta 150-480 ns)")
_SERIES = "a special function or inverse evaluated by a series per element: measured 400 to 1,400 multiply-adds' time"
_SORTS = ("sorts, or sorts a copy of, its input along a dim (n log n compares with cache misses): measured "
          "1,500 to 4,900 multiply-adds' time per element at 2**20 elements")
_SEARCH = ("a binary search per element into a sorted dim (up to 64 dependent loads each, cache misses): "
           "measured 1,600 and, on 2**24 sorted values, 29,000 multiply-adds' time per element")
_UNIQUE = "sorts its input's slices lexicographically (unique_dim): measured 64,560 multiply-adds' time per element"
_TRANSFORMS = ("a fast Fourier transform (n log n, complex arithmetic): measured 600 to 4,500 multiply-adds' time per "
               "element")


def _listed(fact: str, value, reason: str, *names: str) -> dict:
    return {(name, fact): (value, reason) for name in names}


OVERRIDES: dict[tuple[str, str], tuple[object, str]] = {
    **_listed("unmergeable", True, _UNINITIALIZED,
              "empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"),
    **_listed("fresh", True, _ALLOCATES,
              "linear", "conv1d", "conv2d", "conv3d", "matmul", "mm", "bmm", "addmm", "baddbmm", "softmax",
              "log_softmax", "layer_norm", "group_norm", "cat", "stack", "max_pool2d", "avg_pool2d",
              "adaptive_avg_pool2d", "adaptive_max_pool2d", "batch_norm", "hardswish", "pad", "constant_pad_nd",
              "reflection_pad2d", "replication_pad2d"),
    **_listed("outgrows", True, _SIZED,
              "expand", "expand_as", "broadcast_to", "repeat", "repeat_interleave", "tile", "new_zeros", "new_ones",
              "new_full", "new_empty", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "arange",
              "eye", "linspace"),
    **_listed("layout_free", True, _STRIDES,
              "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "batch_norm",
              "hardswish", "hardswish_", "pad", "constant_pad_nd", "reflection_pad2d", "replication_pad2d"),
    **_listed("layout_free", True, _SHAPE, "size", "flatten", "reshape", "contiguous"),
    **_listed("layout_free", True, _INFERENCE, "dropout"),
    **_listed("steps", True, _STEPS, "floor", "ceil", "round", "trunc", "fix", "sign", "remainder", "fmod",
              "floor_divide"),
    **_listed("metadata_only", True, _METADATA, "size", "sym_size", "dim", "numel", "sym_numel", "stride",
              "sym_stride", "_shape_as_tensor", "new_zeros", "new_ones", "new_full", "new_empty", "new_empty_strided",
              "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"),
    **_listed("like_second", True, _LIKE_SECOND, "expand_as", "view_as", "reshape_as", "type_as"),
    **_listed("repeated_dims", True, _REPEATS, "roll", "fft_fftshift", "fft_ifftshift"),
    **_listed("pointwise", True, _UNTAGGED, "floor_divide", "isclose"),
    **_listed("pointwise", True, _UNTAGGED_2_11, "leaky_relu", "leaky_relu_", "hardtanh_"),
    **_listed("data_dependent", ("default",), _NONZERO, "where", "nonzero_numpy"),
    **_listed("numbers_as_tensors", True, _BINDING,
              "add", "sub", "mul", "div", "divide", "true_divide", "floor_divide", "multiply", "subtract"),
    **_listed("numbers_as_tensors", True, _SCALAR_TWIN,
              "remainder", "fmod", "eq", "ne", "lt", "le", "gt", "ge", "pow", "float_power", "where",
              "xlogy", "copysign", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
              "bitwise_right_shift", "__and__", "__or__", "__xor__", "__lshift__", "__rshift__", "rsub", "greater",
              "greater_equal", "less", "less_equal", "not_equal", "special_xlog1py", "special_zeta", "special_xlogy",
              "isin", "lerp", "masked_fill", "index_fill", "fill"),
    **_listed("numbers_as_tensors", True, _LOADER,
              "atan2", "logical_and", "logical_or", "logical_xor", "hypot", "nextafter", "maximum", "minimum",
              "fmax", "fmin", "heaviside", "ldexp", "index_put"),
    **_listed("step_work", 32768, _SPECIAL, "polygamma", "special_zeta", "special_polygamma"),
    **_listed("step_work", 65536, _UNIQUE, "unique_dim", "unique_consecutive", "unique"),
    **_listed("step_work", 32768, _SEARCH, "searchsorted", "bucketize"),
    **_listed("step_work", 8192, _SORTS, "sort", "argsort", "msort", "mode", "quantile", "nanquantile", "median",
              "nanmedian", "kthvalue", "topk", "logit", "special_logit"),
    **_listed("step_work", 8192, _TRANSFORMS, "fft_fft", "fft_ifft", "fft_rfft", "fft_irfft", "fft_hfft",
              "fft_ihfft", "fft_fft2", "fft_ifft2", "fft_rfft2", "fft_irfft2", "fft_fftn", "fft_ifftn", "fft_rfftn",
              "fft_irfftn", "stft", "istft"),
    **_listed("step_work", 2048, _SERIES, "i0", "special_i0e", "special_i1", "special_i1e", "special_log_ndtr",
              "digamma", "special_psi", "special_digamma", "lgamma", "special_gammaln", "mvlgamma",
              "special_multigammaln", "erfinv", "special_ndtri", "asinh", "arcsinh", "acosh", "arccosh", "sinc",
              "special_sinc", "special_xlog1py", "binomial", "logcumsumexp", "special_entr", "_standard_gamma"),
}

# the loader's closed vocabularies of ``str`` arguments (ATen's schemas say only ``str``): argument name ->
# the values eager accepts for every op that has it (gelu's approximate, div's rounding_mode, conv's padding,
# meshgrid's indexing, pad's mode, scatter_reduce's reduce, quantile's interpolation, fft's norm,
# searchsorted's side); another value is refused at load (default-deny)
STRING_ARGUMENTS = {"approximate": {"none", "tanh"}, "rounding_mode": {"trunc", "floor"},
                    "padding": {"same", "valid"}, "indexing": {"ij", "xy"},
                    "mode": {"constant", "reflect", "replicate", "circular"},
                    "reduce": {"sum", "prod", "mean", "amax", "amin", "add", "multiply"},
                    "interpolation": {"linear", "lower", "higher", "midpoint", "nearest"},
                    "norm": {"forward", "backward", "ortho"}, "side": {"left", "right"}}

# arguments that switch a seeded op's randomness off (ATen tags the op nondeterministic_seeded either way):
# argument name -> the test its value must pass for the op to draw
RANDOM_SWITCHES = {"train": "true", "training": "true", "dropout": "nonzero", "dropout_p": "nonzero"}
RANDOM_SWITCH_REASON = _TRAIN


def fact(name: str, which: str):
    """The override for op ``name``'s fact ``which`` (None when the table says nothing)."""
    entry = OVERRIDES.get((name, which))
    return entry[0] if entry is not None else None
