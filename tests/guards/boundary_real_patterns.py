"""Boundary patterns, part 6 (issue #20 round 4): Python-side reads in forward, from real model code.

Collected from transformers, timm, torchvision and research code: ``.tolist()`` arithmetic, ``any(...)`` over a
tensor's rows, ``max(x.shape)`` padding to a square, ``len(x)`` / ``enumerate(x)`` loops, ``int(x.argmax())`` as a
list index, ``bool(isnan(x).any())`` cleanup branches, ``str(x.dtype)`` keys, ``sorted`` / ``divmod`` / ``list(x.shape)
== [...]`` / ``zip(a.shape, b.shape)`` broadcast checks, ``numel() == 0`` shortcuts, pad-to-a-multiple, ``x.ndim``
and ``x.dtype.is_floating_point`` branches, ``.item()`` into ``math.isclose`` / ``round`` / ``'%.1f' %``, ``split``
by ``lengths.tolist()``, ``if x.shape[1:]:``. Each is traced, then called on inputs
that take another path in eager (boundary_patterns.CASES); the line whose guard must fail is marked
``# @<case name>``. The replays (boundary_patterns.REPLAYS) are recorded, not guarded: ``math.prod(x.shape)``,
``torch.finfo(x.dtype).min``, ``min(n, 4)``, ceil division, logging a size, ``torch.jit.is_scripting()`` and
``torch.compiler.is_compiling()`` (False in eager and in the trace).
"""
from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F

_log = logging.getLogger("tracejit.tests.real_patterns")


def tolist_sign(x):
    vals = x.tolist()  # @tolist_sign
    return x * (sum(vals) > 0)


def any_row_positive(x):
    if any(row.sum() > 0 for row in x):  # @any_row_positive
        return x * 2
    return x - 1


def square_pad(x):
    m = max(x.shape[-2:])  # @square_pad
    return F.pad(x, (0, m - x.shape[-1], 0, m - x.shape[-2]))


def len_loop(x):
    out = x.new_zeros(())
    for i in range(len(x)):  # @len_loop
        out = out + x[i].sum() * i
    return out


def argmax_table(x):
    return x * [1.0, 2.0, 3.0, 4.0][int(x.argmax())]  # @argmax_table


def nan_cleanup(x):
    if bool(torch.isnan(x).any()):  # @nan_cleanup
        return torch.nan_to_num(x)
    return x * 2


def dtype_name_key(x):
    return x * {"torch.float32": 1.0, "torch.float64": 2.0}[str(x.dtype)]  # @dtype_name_key


def sorted_sides(x):
    a, b = sorted(x.shape)  # @sorted_sides
    return x.sum() * (a * 10 + b)


def shape_equals_list(x):
    if list(x.shape) == [2, 3]:  # @shape_equals_list
        return x * 2
    return x * 3


def divmod_halves(x):
    q, rem = divmod(x.size(0), 2)  # @divmod_halves
    return x * (q + 10 * rem)


def enumerate_rows(x):
    acc = 0.0
    for i, row in enumerate(x):  # @enumerate_rows
        acc = acc + row * i
    return acc


def broadcast_check(a, b):
    ok = all(p == q or q == 1 for p, q in zip(a.shape, b.shape))  # @broadcast_check
    return a + b if ok else a


def empty_shortcut(x):
    if x.numel() == 0:  # @empty_shortcut
        return x.sum()
    return x.mean()


def pad_to_multiple(x):
    rem = x.shape[-1] % 4
    if rem != 0:  # @pad_to_multiple
        x = F.pad(x, (0, 4 - rem))
    return x * 2


def item_ratio(x):
    s = x.sum().item()  # @item_ratio
    return x / (abs(s) + 1)


def isclose_item(x):
    if math.isclose(x.mean().item(), 0.0, abs_tol=0.5):  # @isclose_item
        return x * 0
    return x


def rounded_max(x):
    k = round(x.abs().max().item())  # @rounded_max
    return x * k


def percent_format_key(x):
    key = "%.1f" % x.max().item()  # @percent_format_key
    return x * len(key)


def split_by_lengths(x, lengths):
    return torch.stack([c.sum() for c in x.split(lengths.tolist())])  # @split_by_lengths


def has_feature_dims(x):
    if x.shape[1:]:  # @has_feature_dims
        return x.flatten(1).sum(1)
    return x * 2


def ndim_branch(x):
    if x.ndim == 3:  # @ndim_branch
        return x.mean(0)
    return x * 2


def floating_branch(x):
    if x.dtype.is_floating_point:  # @floating_branch
        return x * 0.5
    return x * 2


# ---- recorded, not guarded (replays) --------------------------------------------------------------------
def prod_of_shape(x):
    n = math.prod(x.shape)
    return x.reshape(n) * n


def finfo_min_mask(x):
    return x.masked_fill(x < 0, torch.finfo(x.dtype).min)


def min_with_cap(x):
    return x[:min(x.size(0), 4)] * 2


def ceil_division(x):
    return x.new_ones(-(-x.size(0) // 3)) * 2


def log_size(x):
    _log.debug("batch %d", x.size(0))
    return x + x.size(0)


def scripting_branch(x):
    if not torch.jit.is_scripting():
        return x + 1
    return x


def compiling_branch(x):
    if torch.compiler.is_compiling():
        return x * 0
    return x * 5
