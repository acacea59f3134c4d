"""The one table of how much an op allocates and computes, keyed by ATen op name: the budgets at load
(op_checks.check_sizes, on the traced shapes) and at call time (support/call_budget.py, on the real
ones) both read it, and nothing else sizes an op.

``SizeRule.elements(bound arguments)`` is the op's output (or working) elements; ``flops``, where
present, its multiply-adds, counted against ``call_budget.WORK_FACTOR`` times the element budget.
An allowed op without a rule must belong to a family of op_allowlist.py that says why its output is
bounded by its inputs (tests/security/test_size_rules.py holds every allowed op to one or the other).
"""
from __future__ import annotations

import functools
from typing import Callable

from ..records import FrozenRecord

from . import op_sizes as size
from . import op_sizes_args as args
from . import op_sizes_broadcast as several
from . import op_sizes_gates as gates
from . import op_sizes_constants as constant_args
from . import op_sizes_grouped as grouped
from . import op_sizes_strided as strided
from . import op_sizes_linalg as linalg
from . import op_sizes_norms as norms
from . import op_sizes_values as values
from . import op_sizes_vision as vision
from . import op_sizes_work as work
from .op_sizes_refused import refusing
from . import op_sizes_refused as refused


class SizeRule(FrozenRecord):
    """``elements``: bound arguments -> elements allocated (None: unknown yet); ``flops``: bound arguments ->
    multiply-adds (None: bounded by the elements); ``static_factor``: (bound arguments at load, names of
    those that are the file's own tensors) -> (the varying argument, elements and multiply-adds per element
    of it) when fixed at load, else None: the call then runs the full check only when that argument's
    numel() passes a constant; ``empty_only``: the argument whose emptiness alone can make the op outgrow it
    (generated code checks ``if x.numel() == 0:``: a reshape of a non-empty tensor keeps its elements);
    ``call_test``: (bound arguments at load, the file's own tensors) -> (argument, a Python test of it written
    with the bound arguments' names, ``{input}``) or None: the call runs the full check only when the test holds (op_sizes_norms.py: the input's
    shape against the constants the kernel would refuse)."""
    __slots__ = _fields = ("elements", "flops", "static_factor", "empty_only", "call_test")

    def __init__(self, elements: Callable, flops: Callable | None = None, static_factor: Callable | None = None,
                 empty_only: str | None = None, call_test: Callable | None = None):
        object.__setattr__(self, "elements", elements)
        object.__setattr__(self, "flops", flops)
        object.__setattr__(self, "static_factor", static_factor)
        object.__setattr__(self, "empty_only", empty_only)
        object.__setattr__(self, "call_test", call_test)


def _rules(names: str, elements, flops=None, static_factor=None, empty_only=None, call_test=None) -> dict:
    return dict.fromkeys(names.split(), SizeRule(elements, flops, static_factor, empty_only, call_test))


def _pool(op: str) -> SizeRule:
    dims = int(op.split("_pool")[1][0])   # max_pool2d_with_indices -> 2
    return SizeRule(functools.partial(args.pool, dims=dims), functools.partial(args.pool_flops, dims=dims),
                    functools.partial(gates.pool_factor, dims=dims))


RULES: dict[str, SizeRule] = {
    # factories: what their size arguments say
    **_rules("zeros ones full rand randn randint normal new_zeros new_ones new_full", size.factory),
    **_rules("randperm", size.randperm),
    **_rules("eye", size.eye),
    **_rules("tril_indices triu_indices", size.tri_indices),
    **_rules("arange range linspace logspace", size.arange),
    **_rules("hann_window hamming_window blackman_window bartlett_window kaiser_window fft_fftfreq fft_rfftfreq",
             args.window),
    # amplifiers: sizes, repeats, padding, kernel sizes, r, classes
    **_rules("expand broadcast_to", size.expand),
    **_rules("as_strided", strided.as_strided),   # within its input's own elements (op_sizes_strided.py)
    **_rules("expand_as", size.expand_as),
    **_rules("reshape_as view_as type_as", size.like_self),   # two tensors, one of them only lends its shape / dtype
    **_rules("broadcast_tensors", size.broadcast),
    **_rules("meshgrid", size.meshgrid),
    **_rules("repeat tile repeat_interleave", size.repeat),
    **_rules("pad constant_pad_nd reflection_pad1d reflection_pad2d reflection_pad3d replication_pad1d "
             "replication_pad2d replication_pad3d", refusing(refused.circular_padded, size.pad)),
    **_rules("one_hot", size.one_hot),
    **_rules("linalg_vander vander", size.vander),
    **_rules("cartesian_prod", size.cartesian_prod),
    **_rules("combinations", size.combinations),
    **_rules("einsum", size.einsum, size.einsum_flops),
    **_rules("outer ger", size.outer),
    **_rules("kron", size.kron),
    **_rules("im2col", refusing(refused.windowed, size.im2col)),
    **_rules("col2im", refusing(refused.col2im_blocks, size.col2im)),
    **_rules("block_diag", size.block_diag),
    **_rules("conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d convolution _convolution",
             size.convolution, work.convolution_flops, gates.convolution_factor),   # work: round 26
    **_rules("upsample_nearest1d upsample_nearest2d upsample_nearest3d upsample_linear1d upsample_bilinear2d "
             "upsample_bicubic2d upsample_trilinear3d _upsample_nearest_exact1d _upsample_nearest_exact2d "
             "_upsample_nearest_exact3d", refusing(refused.upsampled, size.upsample)),
    **_rules("_upsample_bilinear2d_aa _upsample_bicubic2d_aa", refusing(refused.antialiased, size.upsample)),
    **{op: SizeRule(functools.partial(size.rnn, op=op), work.rnn_flops) for op in size.GATES},   # work: round 25
    # products: the output and the work of a contraction
    **_rules("matmul mm linalg_matmul addmm", linalg.matmul_elements, linalg.matmul_flops,
             linalg.constant_operand_factor),
    **_rules("bmm baddbmm", linalg.matmul_elements, linalg.matmul_flops),
    **_rules("addbmm", linalg.addbmm_elements, linalg.matmul_flops),
    **_rules("addr", linalg.addr_elements),
    **_rules("inner", linalg.inner_elements, linalg.inner_flops),
    **_rules("linear", linalg.linear_elements, linalg.linear_flops, linalg.constant_operand_factor),
    **_rules("bilinear", linalg.bilinear_elements, linalg.bilinear_flops),
    **_rules("tensordot", linalg.tensordot_elements, linalg.tensordot_flops),
    **_rules("chain_matmul linalg_multi_dot", linalg.chain_elements, linalg.chain_flops),
    **_rules("cdist", refusing(refused.cdist_args, linalg.cdist_elements), linalg.cdist_flops),
    **_rules("_grouped_mm", grouped.grouped_mm_elements, grouped.grouped_mm_flops),   # offs checked too
    # more than their input: one result per q per slice; rank coordinates per element
    **_rules("quantile nanquantile", refusing(refused.quantile_q, several.quantile)),
    **_rules("nonzero argwhere", several.nonzero),
    # sized by an int argument next to their input
    **_rules("adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d "
             "adaptive_max_pool3d", refusing(refused.adaptive_pooled, args.adaptive_pool)),
    **_rules("affine_grid_generator", args.affine_grid),
    **_rules("histc", refusing(refused.histogram_range, args.histogram)),
    **_rules("bincount", args.bincount),
    **_rules("fft_fft fft_ifft fft_rfft fft_irfft fft_hfft fft_ihfft fft_fft2 fft_ifft2 fft_rfft2 fft_irfft2 "
             "fft_fftn fft_ifftn fft_rfftn fft_irfftn", args.fft),
    **_rules("stft", refusing(refused.stft_args, args.stft)),
    **_rules("istft", refusing(refused.stft_args, args.istft)),
    **_rules("unfold", args.unfold),
    **_rules("diag diag_embed diagflat", args.diagonal_matrix),
    # one slice per index: the index tensor can be bigger than what it indexes
    **_rules("embedding", args.embedding),
    **_rules("index_select", args.index_select),
    **_rules("index", args.index),
    **_rules("linalg_svd svd", args.svd_factors, linalg.eigen_flops),
    **_rules("linalg_qr qr", args.qr_factors, linalg.factorization_flops),
    # cubic work on their input: counted against the work budget (op_sizes_linalg.py, round 21)
    **_rules("linalg_inv inverse linalg_det det logdet slogdet linalg_slogdet linalg_cholesky cholesky "
             "linalg_solve triangular_solve linalg_solve_triangular", linalg.factorization_elements,
             linalg.factorization_flops),
    **_rules("linalg_eigh linalg_eigvalsh linalg_svdvals linalg_pinv pinverse", linalg.factorization_elements,
             linalg.eigen_flops),
    **_rules("nuclear_norm linalg_matrix_norm linalg_norm", linalg.matrix_norm_elements, linalg.matrix_norm_flops),
    # recurrent cells: an outer product of the input's batch and the weights' gate rows (round 21)
    **_rules("lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell", linalg.cell_elements, linalg.cell_flops),
    **_rules("scaled_dot_product_attention", args.attention, args.attention_flops),
    **_rules("grid_sampler", args.grid_sampler),
    # an empty tensor of a new shape: its extent, which a reduction over its zero makes (op_sizes_values.py)
    **_rules("view reshape view_copy", values.reshaped, empty_only="self"),
    **_rules("unflatten", values.unflattened, empty_only="self"),
    **_rules("pixel_unshuffle", values.pixel_unshuffled, empty_only="self"),
    # constants the kernels refuse, said before they run (op_sizes_constants.py); what they make is their input
    **_rules("pixel_shuffle", constant_args.pixel_shuffled, static_factor=constant_args.same_size),
    **_rules("channel_shuffle native_channel_shuffle", constant_args.channel_shuffled,
             static_factor=constant_args.same_size),
    **_rules("roll", constant_args.rolled, static_factor=constant_args.same_size),
    **_rules("rot90", constant_args.rot90ed, static_factor=constant_args.same_size),
    **_rules("narrow narrow_copy", constant_args.narrowed, static_factor=constant_args.same_size),
    **_rules("select", constant_args.selected, static_factor=constant_args.same_size),
    **_rules("slice", constant_args.sliced, static_factor=constant_args.same_size),
    **_rules("permute permute_copy", constant_args.permuted, static_factor=constant_args.same_size),
    **_rules("flip", constant_args.flipped, static_factor=constant_args.same_size),
    **_rules("diagonal", constant_args.diagonal_taken, static_factor=constant_args.same_size),
    **_rules("movedim moveaxis", constant_args.moved, static_factor=constant_args.same_size),
    **_rules("topk", functools.partial(constant_args.top_k, low=0), static_factor=constant_args.same_size),
    **_rules("kthvalue", functools.partial(constant_args.top_k, low=1), static_factor=constant_args.same_size),
    **{op: SizeRule(values.counted_rule(op), static_factor=constant_args.same_size)
       for op in values.SPLITS},   # their counts checked (op_sizes_values.check_counts)
    **_rules("diff", constant_args.differenced, work.diff_flops),   # work: n passes (op_sizes_work.py, round 26)
    **_rules("renorm", constant_args.renormed, static_factor=constant_args.same_size),
    # normalizations: their constants against the input's shape (op_sizes_norms.py, round 26)
    **_rules("layer_norm rms_norm", norms.layer_normed, call_test=norms.layer_norm_test),
    **_rules("group_norm", norms.group_normed, call_test=norms.group_norm_test),
    # values the kernels trust (op_sizes_values.py): a ValueError is a LoadError / GuardError
    **_rules("mvlgamma special_multigammaln", values.mvlgamma),
    **_rules("matrix_power linalg_matrix_power", values.matrix_power, work.matrix_power_flops),
    # a kernel's scalar loop over every (target, class) pair of a row (op_sizes_work.py, round 25)
    **_rules("multilabel_margin_loss", several.broadcast_or_sum, work.multilabel_margin_flops),
    **_rules("binomial", values.binomial),
    **_rules("_weight_norm", values.weight_norm),
    # pooling: the output is at most the input, the work its window times the output
    **{op: _pool(op) for op in "avg_pool1d avg_pool2d avg_pool3d max_pool1d max_pool2d max_pool3d "
                            "max_pool1d_with_indices max_pool2d_with_indices max_pool3d_with_indices".split()},
}


# the custom ops the recorder keeps as nodes (ops/custom.py), by qualified name: torchvision's
CUSTOM_RULES: dict[str, SizeRule] = {
    "torchvision::nms": SizeRule(vision.nms, vision.nms_flops),
    "torchvision::roi_align": SizeRule(vision.roi_align, vision.roi_align_flops),
}


# splits that return a list: at most the pieces the node unpacks (bound["_tj_unpack"]; op_sizes_values.py)
PIECES: dict[str, SizeRule] = {op: SizeRule(values.pieces_rule(op)) for op in values.SPLITS}
# div / divide with rounding_mode="trunc": the smallest int by -1 traps (SIGFPE)
TRUNC_DIVISION: dict[str, SizeRule] = dict.fromkeys(("div", "divide"), SizeRule(values.trunc_division))


# every other op of two or more tensors: their broadcast or their sum (op_sizes_broadcast.py)
SEVERAL_TENSORS = SizeRule(several.broadcast_or_sum, None, several.constant_factor)


def rule_for(name: str, bound: dict) -> SizeRule | None:
    """The size rule of a node of ``aten::name`` with schema-bound arguments ``bound``: the op's own,
    else ``SEVERAL_TENSORS`` when it takes two or more tensors and writes a new one (an in-place
    ``add_`` writes into its ``self``, whose shape the kernel keeps), else None (one tensor: its
    family says why the output is bounded by it). A split that returns a list gets its PIECES rule when
    ``bound`` holds the pieces its node unpacks (``_tj_unpack``); a division with ``rounding_mode="trunc"``
    its TRUNC_DIVISION rule."""
    base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
    if base in PIECES and "_tj_unpack" in bound:
        return PIECES[base]
    if base in TRUNC_DIVISION and bound.get("rounding_mode") == "trunc":
        return TRUNC_DIVISION[base]
    found = rule(name)
    if found is not None:
        return found
    if name.endswith("_") and not name.startswith("_"):
        return None
    return SEVERAL_TENSORS if sum(map(is_tensor, _leaves(bound))) >= 2 else None


def checks_node(name: str, node) -> bool:
    """Can ``rule_for`` give this node one of the rules that a plain ``rule(name)`` does not name (a split
    that unpacks, a truncating division)? (serialize/budget_plan.py binds only such nodes.)"""
    base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
    return (base in PIECES and "unpack" in node.attrs) or (
        base in TRUNC_DIVISION and node.kwargs.get("rounding_mode") == "trunc")


def with_unpack(name: str, bound: dict, node) -> dict:
    """``bound`` with the pieces a split node unpacks (read by its PIECES rule)."""
    if name in PIECES and isinstance(node.attrs.get("unpack"), int):
        return {**bound, "_tj_unpack": node.attrs["unpack"]}
    return bound


def _leaves(bound: dict):
    for v in bound.values():
        yield from (v if isinstance(v, (list, tuple)) else (v,))


def is_tensor(v) -> bool:
    """A tensor, or a traced Value of tensor type (at load and in the code generator)."""
    return hasattr(v, "numel") or hasattr(getattr(v, "type", None), "shape")


def rule(name: str) -> SizeRule | None:
    """The size rule of ``aten::name`` (its in-place variant ``name_`` shares it), or None."""
    found = RULES.get(name)
    if found is None and name.endswith("_") and not name.startswith("_"):
        found = RULES.get(name[:-1])
    return found
