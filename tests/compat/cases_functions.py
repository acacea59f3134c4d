"""Differential cases: plain functions as torch's docs and tutorials use them (elementwise math,
reductions, shapes and views, indexing, dtypes, tuples/lists/dicts in and out, in-place ops)."""

import torch
import torch.nn.functional as F

from harness import Case, Inputs

_in = Inputs(1234)
R, I, new2, elementwise = _in.R, _in.I, _in.new2, _in.elementwise


def _topk_mask(x):
    vals, idx = x.topk(2, dim=-1)
    return torch.zeros_like(x).scatter(-1, idx, vals)

def _chunk_sum(x):
    a, b = x.chunk(2, dim=-1)
    return a * torch.sigmoid(b)

def _max_with_index(x):
    values, indices = x.max(dim=1)
    return values, indices

def _nested_out(x, y):
    return x + y, (x * y, (x - y, y))

def _flatten_batch(x):
    return x.view(x.size(0), -1)

def _reshape_keep_last(x):
    return x.reshape(-1, x.shape[-1]).sum(0)

def _einsum_bilinear(x, w, y):
    return torch.einsum("bi,oij,bj->bo", x, w, y)

def _cross_entropy(logits, target):
    return F.cross_entropy(logits, target)

def _cosine(a, b):
    return F.cosine_similarity(a, b, dim=-1)

def _where_relu(x):
    return torch.where(x > 0, x, 0.1 * x)

def _cumsum_norm(x):
    c = x.cumsum(-1)
    return c / c.abs().amax(-1, keepdim=True).clamp_min(1e-3)

def _index_select_rows(x, idx):
    return x.index_select(0, idx) * 2

def _advanced_index(x, idx):
    return x[idx]

def _bool_mask_select(x):
    return x[:, ::2] * x[:, 1::2].sigmoid()

def _new_zeros_fill(x):
    out = x.new_zeros(x.shape)
    out[:, 0] = x[:, 0]
    return out + x

def _full_like_arange(x):
    return torch.arange(x.size(0), dtype=x.dtype).unsqueeze(1) * x

def _stack_unbind(x):
    return torch.stack(list(x.unbind(1)[::-1]), dim=1)

def _logits_argmax(x):
    return x.argmax(-1), x.softmax(-1).max(-1).values

def _clamp_round(x):
    return (x * 10).round().clamp(-5, 5).to(torch.int64)

def _type_as(x, y):
    return x.type_as(y) + y

def _transpose_conv_like(x, w):
    return F.conv2d(x, w, padding=1)

def _baddbmm(b, x, y):
    return torch.baddbmm(b, x, y, alpha=0.5)

def _sort_gather(x):
    s, i = x.sort(dim=-1, descending=True)
    return s[..., :2], i[..., :2]

def _one_hot_float(idx, x):
    return F.one_hot(idx, 5).to(x.dtype) * x

def _squeeze_unsqueeze(x):
    return x.unsqueeze(0).unsqueeze(-1).squeeze(0).squeeze(-1) + 1

def _permute_contig(x):
    return x.permute(0, 2, 1).contiguous() * 3

def _split_sizes(x):
    a, b = x.split([1, x.size(1) - 1], dim=1)
    return b - a

def _narrow_roll(x):
    return x.narrow(1, 1, 2).roll(1, 0)

def _flip_cat(x):
    return torch.cat([x, x.flip(-1)], dim=0)

def _tril_fill(x):
    return x.tril(-1) + x.triu(1).neg()

def _lerp_addcmul(x, y):
    return torch.lerp(x, y, 0.3).addcmul(x, y, value=0.5)

def _logsumexp(x):
    return torch.logsumexp(x, dim=-1) - x.std(-1)

def _norms(x):
    return x.norm(dim=-1), F.normalize(x, dim=-1)

def _adaptive(x):
    return F.adaptive_avg_pool2d(x, (1, 1)).flatten(1)

def _pool_relu(x):
    return F.max_pool2d(F.relu(x), 2) + 2

def _linear_fn(x, w, b):
    return F.linear(x, w, b)

def _matmul_bias(x, w):
    return x.matmul(w).add_(1.0)

def _list_of_inputs(xs):
    return xs[0] * xs[1] + xs[2]

def _dict_input(d):
    return d["a"] @ d["b"]

def _tuple_input(x, pair):
    return x + pair[0] * pair[1]

def _inplace_input(x, y):
    x.add_(y)
    return x * 2

def _setitem_input(x, y):
    x[:, 0] = y
    return x

def _outputs_alias(x):
    y = x.view(-1)
    return x, y

def _repeat_expand(x):
    return x.repeat(2, 1) + x.mean(0).expand(x.size(0) * 2, x.size(1))

def _scalar_tensor_math(x):
    return x * torch.tensor(2.0) + torch.tensor(1.0)

def _dtype_promotion(x, i):
    return x + i

def _bucketize(x):
    return torch.bucketize(x, torch.tensor([-1.0, 0.0, 1.0]))

def _nonzero_count(x):
    return (x > 0).sum(-1)

def _any_all(x):
    return (x > 0).any(-1), (x > -5).all(-1)

def _complex_free(x):
    return torch.atan2(x[..., 0], x[..., 1])

def _mean_dims(x):
    return x.mean(dim=(1, 2)), x.amax(dim=(1, 2))


CASES = [
    elementwise("relu", torch.relu),
    elementwise("sigmoid", torch.sigmoid),
    elementwise("tanh", torch.tanh),
    elementwise("gelu", F.gelu, "transformers activations"),
    elementwise("silu", F.silu),
    elementwise("softplus", F.softplus),
    elementwise("leaky_relu_where", _where_relu),
    elementwise("softmax_last", lambda x: x.softmax(-1)),
    elementwise("log_softmax", lambda x: F.log_softmax(x, 1)),
    elementwise("exp_log1p", lambda x: torch.log1p(x.exp())),
    elementwise("pow_abs", lambda x: x.abs().pow(1.5)),
    elementwise("clamp_round_int", _clamp_round),
    elementwise("cumsum_norm", _cumsum_norm),
    elementwise("chunk_glu", _chunk_sum, "GLU-style gating"),
    elementwise("logsumexp_std", _logsumexp),
    elementwise("tril_triu", _tril_fill),
    elementwise("narrow_roll", _narrow_roll),
    elementwise("flip_cat", _flip_cat),
    elementwise("split_sizes", _split_sizes),
    Case("stack_unbind", _stack_unbind, (R(3, 4),), new2([(5, 4)], [(1, 4)]), deliberate="warns-fixed-count"),
    elementwise("repeat_expand", _repeat_expand),
    elementwise("squeeze_unsqueeze", _squeeze_unsqueeze),
    elementwise("new_zeros_fill", _new_zeros_fill),
    elementwise("arange_from_size", _full_like_arange),
    elementwise("bool_slices", _bool_mask_select),
    elementwise("topk_scatter", _topk_mask),
    elementwise("sort_top2", _sort_gather),
    elementwise("norms", _norms),
    elementwise("any_all", _any_all),
    elementwise("nonzero_count", _nonzero_count),
    Case("bucketize", _bucketize, (R(3, 4),), new2([(5, 4)], [(2, 7)]), deliberate="no-torch-tensor-warning"),
    elementwise("logits_argmax", _logits_argmax),
    elementwise("max_with_index", _max_with_index),
    Case("scalar_tensor_constants", _scalar_tensor_math, (R(3, 4),), new2([(5, 4)], [(2, 7)]),
         deliberate="no-torch-tensor-warning"),
    elementwise("reshape_keep_last", _reshape_keep_last),
    elementwise("flatten_batch", _flatten_batch,
                                                                      "torchvision classifier heads"),
    Case("permute_contiguous", _permute_contig, (R(2, 3, 4),), new2([(3, 5, 2)], [(1, 2, 6)]), grad=True),
    Case("mean_over_dims", _mean_dims, (R(2, 3, 4),), new2([(3, 5, 2)], [(1, 2, 6)])),
    Case("atan2_last_dim", _complex_free, (R(3, 2),), new2([(7, 2)], [(1, 2)]), grad=True),
    Case("cross_entropy", _cross_entropy, (R(4, 5), I(5, 4)), [(R(7, 5), I(5, 7)), (R(1, 5), I(5, 1))], grad=True),
    Case("cosine_similarity", _cosine, (R(3, 4), R(3, 4)), new2([(5, 4), (5, 4)], [(2, 4), (2, 4)]), grad=True),
    Case("adaptive_avg_pool", _adaptive, (R(2, 3, 5, 5),), new2([(1, 3, 7, 4)], [(4, 3, 2, 2)])),
    Case("max_pool_relu", _pool_relu, (R(2, 3, 6, 6),), new2([(1, 3, 8, 4)], [(3, 3, 2, 2)]),
         source="torch test_tracer max_pool"),
    Case("conv2d_functional", _transpose_conv_like, (R(1, 2, 5, 5), R(3, 2, 3, 3)),
         new2([(2, 2, 4, 6), (3, 2, 3, 3)], [(1, 2, 7, 3), (3, 2, 3, 3)]), grad=True),
    Case("linear_functional", _linear_fn, (R(2, 4), R(3, 4), R(3)), new2([(5, 4), (3, 4), (3,)],
                                                                          [(1, 6), (2, 6), (2,)]), grad=True),
    Case("einsum_bilinear", _einsum_bilinear, (R(2, 3), R(4, 3, 5), R(2, 5)),
         new2([(6, 3), (4, 3, 5), (6, 5)], [(1, 2), (3, 2, 2), (1, 2)]), grad=True),
    Case("baddbmm", _baddbmm, (R(2, 3, 5), R(2, 3, 4), R(2, 4, 5)),
         new2([(1, 2, 2), (1, 2, 3), (1, 3, 2)], [(3, 1, 4), (3, 1, 2), (3, 2, 4)])),
    Case("one_hot_scale", _one_hot_float, (I(5, 4), R(4, 5)), [(I(5, 6), R(6, 5)), (I(5, 2), R(2, 5))]),
    Case("index_select_rows", _index_select_rows, (R(5, 3), torch.tensor([0, 2])),
         [(R(6, 2), torch.tensor([5, 1, 0])), (R(3, 4), torch.tensor([2]))]),
    Case("advanced_index", _advanced_index, (R(5, 3), torch.tensor([4, 0])),
         [(R(6, 2), torch.tensor([1, 1, 5])), (R(3, 4), torch.tensor([2]))]),
    Case("type_as", _type_as, (I(5, 3, 4), R(3, 4)), [(I(5, 2, 2), R(2, 2)), (I(5, 1, 6), R(1, 6))]),
    Case("dtype_promotion_int_float", _dtype_promotion, (R(3), I(4, 3)), [(R(5), I(9, 5)), (R(1), I(3, 1))]),
    Case("nested_tuple_output", _nested_out, (R(2, 3), R(2, 3)), new2([(4, 1), (4, 1)], [(1, 5), (1, 5)]),
         source="torch test_tracer trace_tuple"),
    Case("tuple_input", _tuple_input, (R(3), (R(3), R(3))), [(R(5), (R(5), R(5))), (R(1), (R(1), R(1)))]),
    Case("list_example_is_args", lambda a, b: a * b + b, [R(3), R(3)], new2([(4,), (4,)], [(1,), (1,)]),
         source="issue 9: trace(f, [x, y])"),
    Case("list_input_one_arg", _list_of_inputs, ([R(2), R(2), R(2)],),
         [([R(4), R(4), R(4)],), ([R(1), R(1), R(1)],)]),
    Case("dict_input", _dict_input, ({"a": R(2, 3), "b": R(3, 4)},),
         [({"a": R(5, 3), "b": R(3, 1)},), ({"a": R(1, 2), "b": R(2, 2)},)], source="torch test_tracer dict input"),
    Case("dict_input_extra_key_ignored", _dict_input, ({"a": R(2, 3), "b": R(3, 4)},),
         [({"a": R(5, 3), "b": R(3, 1), "c": R(1)},), ({"b": R(2, 2), "a": R(1, 2), "z": R(3)},)],
         source="torch test_tracer input_dict_remembers_keys"),
    Case("inplace_on_input", _inplace_input, (R(3), R(3)), new2([(5,), (5,)], [(2,), (2,)])),
    Case("setitem_on_input", _setitem_input, (R(3, 4), R(3)), new2([(5, 2), (5,)], [(1, 6), (1,)])),
    Case("outputs_alias_views", _outputs_alias, (R(2, 3),), new2([(4, 2)], [(1, 5)])),
    Case("matmul_then_inplace_add", _matmul_bias, (R(2, 3), R(3, 4)), new2([(5, 3), (3, 2)], [(1, 2), (2, 2)]),
         grad=True),
]
