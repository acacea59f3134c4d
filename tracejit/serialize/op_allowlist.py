"""The ATen ops a saved file may name: one reviewed table, op family -> its ops, argument check and
(for ops that can allocate more than their inputs) size rule, kept in size_rules.py.

Default-deny: an op nobody listed here is refused at load (LoadError naming it), however public it
is. The table holds what tracing real models records (tests/models, the suite's saved programs;
tests/security/test_op_allowlist.py keeps it so) plus the public ops of the same kinds, reviewed by
family. Not on it: private ``_`` helpers (except those reviewed one by one in ``private``), ``unsafe``
variants, ops that trust their arguments (``native_batch_norm``, ``batch_norm_update_stats``,
``_native_batch_norm_legit``, ``segment_reduce``, ``_sobol_engine_*``, ``_weight_norm_interface``,
``_cummax_helper``, ``fused_moving_avg_obs_fake_quant``, ``grid_sampler_2d`` / ``3d`` called
directly), and anything that reaches files, raw storage, strides or sparse / quantized layouts.

An in-place variant (``add_``) is allowed where its op is, in the families marked ``inplace``.
To add an op: put it in the family whose review covers it (or a new family with its own check and
review), and add a hostile file for its check to tests/security/catalogue_ops.py.
"""
from __future__ import annotations

from typing import Callable

from ..records import FrozenRecord

from . import op_checks as chk
from . import size_rules


class Family(FrozenRecord):
    """A family of allowed ops: ``name``, ``ops``, ``check`` (the load-time argument check: check(op name,
    bound arguments, where)), ``review`` (why this check, with the schema check, is enough for these ops),
    ``inplace`` (``op_`` is allowed too)."""
    __slots__ = _fields = ("name", "ops", "check", "review", "inplace")

    def __init__(self, name: str, ops: frozenset, check: Callable, review: str, inplace: bool = False):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "ops", ops)
        object.__setattr__(self, "check", check)
        object.__setattr__(self, "review", review)
        object.__setattr__(self, "inplace", inplace)


def _ops(text: str) -> frozenset:
    return frozenset(text.split())


FAMILIES = (
    Family("pointwise", _ops("""
        abs absolute neg negative positive sign sgn signbit add sub subtract rsub mul multiply div divide true_divide
        floor_divide remainder fmod pow float_power square sqrt rsqrt exp exp2 expm1 log log2 log10 log1p
        sin cos tan asin acos atan atan2 arctan2 sinh cosh tanh asinh acosh atanh arcsin arccos arctan arcsinh arccosh
        arctanh sigmoid logit erf erfc erfinv lgamma digamma polygamma mvlgamma i0 sinc deg2rad rad2deg reciprocal
        floor ceil round trunc frac fix clamp clip clamp_min clamp_max maximum minimum fmax fmin hypot nextafter copysign
        ldexp xlogy lerp addcmul addcdiv heaviside logaddexp logaddexp2 nan_to_num real imag conj conj_physical angle
        eq ne lt le gt ge equal greater greater_equal less less_equal not_equal isnan isinf isfinite isposinf isneginf
        isreal isclose allclose logical_and logical_or logical_xor logical_not bitwise_and bitwise_or bitwise_xor
        bitwise_not bitwise_left_shift bitwise_right_shift __and__ __or__ __xor__ __lshift__ __rshift__
        __iand__ __ior__ __ixor__ __ilshift__ __irshift__ where masked_fill relu relu6 leaky_relu elu selu celu gelu
        silu mish hardtanh hardsigmoid hardswish hardshrink softshrink softplus threshold prelu rrelu glu
        log_sigmoid special_expit special_erf special_erfc special_logit special_xlogy special_xlog1py
        special_i0e special_i1 special_i1e special_ndtr special_ndtri special_log_ndtr special_entr special_sinc
        special_round special_psi special_digamma special_gammaln special_multigammaln special_exp2 special_expm1
        special_log1p special_zeta dropout feature_dropout alpha_dropout feature_alpha_dropout bernoulli
        floordiv copy fill zero uniform binomial"""), chk.schema_only,
        "element by element on broadcast inputs (copy_ / fill_ / zero_ write into a tensor of the same shape): the output is no bigger than the inputs' broadcast, and the "
        "kernels index nothing by a value; the schema check types every argument (dropout's p in [0, 1])",
        inplace=True),
    Family("reductions", _ops("""
        sum nansum mean nanmean prod max min amax amin aminmax argmax argmin all any std var std_mean var_mean norm
        frobenius_norm nuclear_norm linalg_norm linalg_vector_norm linalg_matrix_norm logsumexp logcumsumexp cumsum
        cumprod cummax cummin softmax log_softmax special_softmax special_log_softmax topk sort argsort msort
        median nanmedian mode kthvalue quantile nanquantile count_nonzero dist cosine_similarity pairwise_distance cdist
        renorm diff trace item unique_consecutive unique_dim histc bincount searchsorted bucketize"""), chk.schema_only,
        "reduce or scan along checked dimensions; the output is no bigger than the input (topk's k, kthvalue's k, "
        "diff's n and renorm's p / maxnorm are checked at load by their rules, quantile's q by the kernel; "
        "histc's bins and bincount's minlength count in the allocation budget; the spectral and nuclear matrix "
        "norms count an SVD's work)"),
    Family("shape", _ops("""
        view view_as reshape reshape_as permute transpose swapaxes swapdims movedim moveaxis t adjoint mT mH numpy_T
        unsqueeze squeeze flatten unflatten ravel select slice narrow narrow_copy chunk tensor_split split
        split_with_sizes hsplit vsplit dsplit unbind contiguous clone detach flip fliplr flipud rot90 roll
        diagonal diag diag_embed diagflat tril triu size dim numel stride is_contiguous is_floating_point is_complex
        type_as to alias_copy atleast_1d atleast_2d atleast_3d squeeze_copy unsqueeze_copy view_copy
        permute_copy transpose_copy unfold"""), chk.schema_only,
        "the same elements in a new arrangement: views and copies of the input (view / reshape to constant "
        "sizes are checked against the traced input's elements; -1 resolved there); in place (transpose_), "
        "only the view's metadata changes", inplace=True),
    Family("gather_scatter", _ops("""
        cat concat concatenate stack hstack vstack dstack column_stack row_stack index index_select gather scatter
        scatter_add scatter_reduce index_add index_copy index_fill index_put index_reduce masked_select masked_scatter
        take take_along_dim nonzero argwhere embedding put"""), chk.schema_only,
        "every index is bounds-checked by the kernel (an IndexError, never a read outside the tensor); the output "
        "has the index tensor's or the inputs' elements", inplace=True),
    Family("linear_algebra", _ops("""
        matmul mm bmm mv dot vdot inner addmm addmv addbmm baddbmm addr linear bilinear chain_matmul tensordot
        linalg_matmul linalg_inv linalg_det det logdet slogdet linalg_slogdet linalg_solve linalg_cholesky cholesky
        linalg_qr qr linalg_svd svd linalg_svdvals linalg_eigh linalg_eigvalsh linalg_pinv pinverse inverse
        linalg_cross cross triangular_solve linalg_solve_triangular matrix_power linalg_matrix_power
        linalg_multi_dot"""), chk.schema_only,
        "shapes checked by the kernels (mismatched inner dimensions raise); the output's elements are bounded "
        "by the inputs' (m x n from m x k and k x n)"),
    Family("nn", _ops("""
        layer_norm group_norm rms_norm max_pool1d max_pool2d max_pool3d max_pool1d_with_indices
        max_pool2d_with_indices max_pool3d_with_indices avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d
        adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d 
        pixel_shuffle pixel_unshuffle channel_shuffle lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell native_channel_shuffle scaled_dot_product_attention
        affine_grid_generator"""), chk.schema_only,
        "shapes checked by the kernels (pooling padding at most half the kernel, normalized_shape against the "
        "weight; the RNN cells check their hidden states' batch and size); the output is no bigger than the input"),
    Family("norm_with_statistics", _ops("batch_norm instance_norm"), chk.batch_norm,
           "aten::batch_norm / instance_norm check running statistics against the input's channels at call time "
           "themselves; at load the statistics must exist in eval mode and match the traced channels (their "
           "native_ kernels trust that, so those are not on the list)"),
    Family("group_norm", _ops("group_norm"), chk.group_norm,
           "num_groups positive; its divisibility of the channels and the weight's count checked by its size rule "
           "at load and before a call whose shape differs (op_sizes_norms.py)"),
    Family("grid_sampling", _ops("grid_sampler"), chk.grid_sampler,
           "interpolation and padding modes are enums the kernel does not range-check (mode 7 returns unwritten "
           "memory): both must be constants in range; shapes checked by the kernel"),
    Family("losses", _ops("""
        mse_loss l1_loss smooth_l1_loss huber_loss nll_loss nll_loss2d nll_loss_nd cross_entropy_loss
        binary_cross_entropy binary_cross_entropy_with_logits kl_div soft_margin_loss hinge_embedding_loss
        margin_ranking_loss cosine_embedding_loss poisson_nll_loss triplet_margin_loss multi_margin_loss
        multilabel_margin_loss"""), chk.loss,
        "reduction is an enum (0 none, 1 mean, 2 sum) the kernels switch on: in range; targets are bounds-checked"),
    Family("samplers_in_place", _ops("normal_ random_ exponential_ cauchy_ log_normal_ geometric_"), chk.schema_only,
           "fill their own tensor in place with draws (``torch.empty_like(y).normal_(generator=g)``): the output is "
           "the input, element by element; the kernels check the distribution's parameters (std >= 0, p in (0, 1), "
           "from < to) and the schema check types them and the generator (only one the program makes)"),
    Family("factories", _ops("""
        zeros ones full rand randn randint randperm normal new_zeros new_ones new_full eye tril_indices triu_indices
        arange range linspace logspace"""), chk.sized,
        "they allocate what their size arguments say: the count is checked against the file's budget at load "
        "(constant sizes) and at call time (traced sizes)"),
    Family("like_and_data", _ops("""
        zeros_like ones_like full_like rand_like randn_like randint_like scalar_tensor tensor as_tensor"""),
        chk.schema_only,
        "*_like ops are shaped like their input tensor; scalar_tensor makes one element; tensor / as_tensor "
        "hold their data in the file (at most 65,536 numbers, checked by the schema check)"),
    Family("amplifiers", _ops("""
        expand expand_as broadcast_to broadcast_tensors repeat tile repeat_interleave pad constant_pad_nd
        reflection_pad1d reflection_pad2d reflection_pad3d replication_pad1d replication_pad2d replication_pad3d
        one_hot linalg_vander vander block_diag cartesian_prod combinations einsum outer ger kron im2col col2im
        conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d convolution upsample_nearest1d
        upsample_nearest2d upsample_nearest3d upsample_linear1d upsample_bilinear2d upsample_bicubic2d
        upsample_trilinear3d _upsample_nearest_exact1d _upsample_nearest_exact2d _upsample_nearest_exact3d
        _upsample_bilinear2d_aa _upsample_bicubic2d_aa meshgrid"""), chk.sized,
        "their output can outgrow their inputs (sizes, repeats, padding, kernel sizes and dilation, r, classes): "
        "each has a size function counted against the budget at load and, for sizes that follow the inputs, "
        "at call time. The antialiased resizes (_upsample_*_aa: interpolate(antialias=True), DINOv2's position "
        "embeddings) read a window that widens with the scale: only the output size, or scale factors that make "
        "it, may set that scale (explicit scales_h / scales_w are refused: a scale of 1e-30 with a large output "
        "would read the whole input for each output element)"),
    Family("strided_view", _ops("as_strided"), chk.sized,
           "a view with sizes and strides of its own (Longformer's overlapping chunks): its size rule "
           "(op_sizes_strided.py) holds the view within its input's own elements (contiguous input, no negative "
           "stride, offset and last element inside) and counts its elements, at load on the traced shapes and "
           "before every call on the real tensor; ATen checks the storage bounds too. Only as_strided: "
           "as_strided_ (which rewrites a tensor's metadata in place), as_strided_scatter and the *_strided "
           "factories stay refused (schema_check.is_denied_op)"),
    Family("recurrent", _ops("lstm gru rnn_tanh rnn_relu"), chk.sized,
           "the kernels trust the weights' and hidden states' shapes (an LSTM hidden state of the wrong size "
           "corrupts the heap): its size function checks every shape against the input's, at load on the "
           "traced shapes and before every call on the real ones; packed sequences are refused"),
    Family("fft", _ops("""
        fft_fft fft_ifft fft_rfft fft_irfft fft_hfft fft_ihfft fft_fft2 fft_ifft2 fft_rfft2 fft_irfft2 fft_fftn
        fft_ifftn fft_rfftn fft_irfftn fft_fftshift fft_ifftshift fft_fftfreq fft_rfftfreq stft istft
        hann_window hamming_window blackman_window bartlett_window kaiser_window"""), chk.schema_only,
        "n / s / window sizes are size arguments counted in the allocation budget at load; norm from a fixed set"),
    Family("private", _ops("_upsample_nearest_exact1d _upsample_nearest_exact2d "
                           "_upsample_nearest_exact3d _to_copy _log_softmax _softmax _shape_as_tensor _standard_gamma "
                           "_convolution _grouped_mm _weight_norm"),
           chk.schema_only,
           "reviewed one by one: _upsample_nearest_exact1d, _upsample_nearest_exact2d and "
           "_upsample_nearest_exact3d are F.interpolate's nearest-exact, checked like upsample_nearest (and sized "
           "as amplifiers); _to_copy is .to's copy; _softmax / _log_softmax take a checked dim and a bool; "
           "_shape_as_tensor makes a 1-D tensor of the sizes; _standard_gamma samples element by element "
           "(torch.distributions), its output shaped like its input; _convolution is convolution's dispatcher "
           "(TorchScript files name it; migrate keeps it) with three more bools, sized as convolution; "
           "_grouped_mm is transformers' mixture of experts (each expert's rows times its weights): the kernel "
           "checks ranks, dtypes and offs's length but trusts offs's values, which its size rule checks before "
           "every call (op_sizes_grouped.py: non-decreasing from 0 to the ragged size), its output and work sized "
           "there; _weight_norm is nn.utils.weight_norm's op (wav2vec2's positional convolution), recorded as "
           "eager runs it (its fused CPU kernel's sums, bit for bit): that kernel trusts g to hold v.size(dim) "
           "values, which its size rule checks at load and before every call (op_sizes_values.weight_norm); "
           "_weight_norm_interface, the kernel itself, stays off"),
)

# Default-deny for sizes: every allowed op has a size rule (size_rules.py) or belongs to a family
# named here, with the reason its output (and work) is bounded by its inputs' elements. An op of a
# family missing here, without a rule, fails tests/security/test_size_rules.py.
BOUNDED_BY_INPUTS = {
    "pointwise": "element by element: one output element per element of the inputs' broadcast (a "
                 "broadcast of [n, 1] and [1, m] is the one way to grow, see docs/SECURITY.md)",
    "reductions": "reduce, scan or sort along a dimension: at most the input's elements (topk, kthvalue, diff, "
                  "renorm, histc, bincount, cdist and the spectral norms have rules)",
    "shape": "views and copies of the input: the same elements or fewer (unfold and the diagonal "
             "matrices, which can view or make more, have rules; narrow, select, slice, roll and the splits "
             "have rules for the constants their kernels refuse; every constant dim is within the rank)",
    "gather_scatter": "concatenations hold their inputs' elements; gather, scatter, take and masked ops "
                      "are shaped like an input or index (embedding, index and index_select have rules)",
    "linear_algebra": "mv, dot, solves, inverses, determinants, powers and decompositions make at most "
                      "their inputs' elements (the products and full factorizations have rules; the "
                      "factorizations' cubic work is counted)",
    "nn": "normalization, pooling (padding at most half the kernel, checked by the kernel), pixel and "
          "channel shuffles: shaped like their input (adaptive pooling, affine grids, attention and the RNN "
          "cells, whose gates are batch x weight rows, have rules)",
    "norm_with_statistics": "normalization: shaped like its input",
    "group_norm": "normalization: shaped like its input",
    "losses": "element by element, then reduced: at most the inputs' broadcast",
    "samplers_in_place": "each writes its own tensor's elements: the output is the input",
    "like_and_data": "*_like are shaped like their input; scalar_tensor is one element; tensor data is "
                     "held in the file (at most 65,536 numbers)",
    "fft": "fftshift / ifftshift roll their input (the transforms, windows and stft have rules)",
    "private": "_to_copy, _softmax, _log_softmax, _standard_gamma are shaped like their input; "
               "_shape_as_tensor holds the input's rank (the others have rules)",
}

# op name -> its family (an op in two families gets the first, a more specific check wins below)
_BY_NAME: dict[str, Family] = {}
for _fam in FAMILIES:
    for _op in _fam.ops:
        _BY_NAME.setdefault(_op, _fam)
for _fam in FAMILIES:
    if _fam.check is not chk.schema_only:
        for _op in _fam.ops:
            _BY_NAME[_op] = _fam
ALLOWED = frozenset(_BY_NAME)


def family(name: str) -> Family | None:
    """The family that allows ``aten::name`` (or its in-place variant ``name``), or None."""
    fam = _BY_NAME.get(name)
    if fam is None and name.endswith("_") and not name.startswith("_"):
        fam = _BY_NAME.get(name[:-1])
        if fam is not None and not fam.inplace:
            fam = None
    return fam


def size_rule(name: str):
    """The size rule of ``aten::name`` (size_rules.py; None: its family says why its output is bounded
    by its inputs)."""
    return size_rules.rule(name)
