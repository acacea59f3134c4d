"""Guard patterns: Python that reads a traced value, as real model code does.

Each ``Case`` is traced on ``example`` and called on ``new`` inputs. The line whose
guard must fail is marked ``# @<case name>``. ``jit_stale`` says that torch.jit.trace
returns the example's stale answer for at least one new input (checked by the tests).
Sources: the table of issue 10 and transformers' modeling files (padding math, mask
ranks, cache lengths, ``is_causal = q_len > 1``, interpolate sizes, ...).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)


@dataclass
class Case:
    name: str
    fn: Callable
    example: tuple
    new: list
    guard_fails: bool = True     # some new input must fail a guard (loaded: GuardError at the marked line)
    jit_stale: bool = True       # torch.jit.trace silently returns a wrong answer on some new input
    tol: float = 1e-5
    extra: Any = field(default=None)


def r(*shape):
    return torch.randn(*shape)


# ---- the rows of issue 10 ----------------------------------------------------------------------
def size_branch(x):
    if x.size(0) > 3:  # @size_branch
        return x * 2
    return x - 1


def value_branch(x):
    if x.sum() > 0:  # @value_branch
        return x * 2
    return x - 1


def data_slice(x, m):
    return x[:int(m.sum())] * 2  # @data_slice


def range_loop(x):
    acc = torch.zeros_like(x[0])
    for i in range(x.size(0)):  # @range_loop
        acc = acc * 0.5 + x[i]
    return acc


def item_scale(x):
    return x * x.max().item()  # @item_scale


class TFSamePadConv(nn.Module):
    """TF 'SAME' padding computed in Python from H, W (EfficientNet / MobileNet ports)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, stride=2)

    def forward(self, x):
        ih, iw = x.shape[-2:]
        oh, ow = math.ceil(ih / 2), math.ceil(iw / 2)  # @tf_same_padding
        pad_h = max((oh - 1) * 2 + 3 - ih, 0)
        pad_w = max((ow - 1) * 2 + 3 - iw, 0)
        x = F.pad(x, [pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2])
        return self.conv(x)


def causal_decode_step(q, k, v):
    """GPT-2 / Llama: ``is_causal = q_len > 1`` picks SDPA's mask."""
    q_len = q.shape[2]
    is_causal = q_len > 1  # @causal_decode
    if torch.jit.is_tracing() and isinstance(is_causal, torch.Tensor):   # as transformers' sdpa_attention does
        is_causal = is_causal.item()
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def rank_reduce(x):
    return x.sum() if x.dim() == 2 else x.mean()  # @rank_reduce


def elementwise(x):
    return torch.sigmoid(x) * 2 + 1


# ---- patterns from transformers' modeling files ---------------------------------------------------
def extended_mask(scores, attention_mask):
    """BERT's get_extended_attention_mask: 2-D padding mask or 3-D full mask."""
    if attention_mask.dim() == 3:  # @extended_mask
        mask = attention_mask[:, None, :, :]
    else:
        mask = attention_mask[:, None, None, :]
    return scores + (1.0 - mask) * -10000.0


def cache_length_branch(q, k):
    """Decoder attention: prefill (k as long as q) or decode (k longer: no causal mask)."""
    scores = q @ k.transpose(-1, -2)
    if k.size(1) == q.size(1):  # @cache_length
        mask = torch.ones(q.size(1), k.size(1)).tril().bool()
        scores = scores.masked_fill(~mask, -1e9)
    return scores.softmax(-1)


def interpolate_scale(x):
    h, w = x.shape[-2:]
    return F.interpolate(x, size=(h * 2, int(w * 1.5)), mode="nearest")  # @interpolate_scale


class WindowPad(nn.Module):
    """Swin: pad H, W to a multiple of the window, partition, attend, unpad."""

    def __init__(self, ws=4):
        super().__init__()
        self.ws = ws
        self.proj = nn.Linear(3, 3)

    def forward(self, x):
        b, h, w, c = x.shape
        pad_b = (self.ws - h % self.ws) % self.ws
        pad_r = (self.ws - w % self.ws) % self.ws
        if pad_b > 0 or pad_r > 0:  # @window_pad
            x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        hp, wp = x.shape[1], x.shape[2]
        win = x.view(b, hp // self.ws, self.ws, wp // self.ws, self.ws, c).transpose(2, 3)
        win = self.proj(win.reshape(-1, self.ws * self.ws, c)).softmax(1)
        out = win.view(b, hp // self.ws, wp // self.ws, self.ws, self.ws, c).transpose(2, 3).reshape(b, hp, wp, c)
        return out[:, :h, :w, :].contiguous()


def iterate_rows(x):
    out = []
    for row in x:  # @iterate_rows
        out.append(row.sum())
    return torch.stack(out)


def tolist_lengths(x, lengths):
    """Pack-like code: per-sequence lengths read as Python ints."""
    lens = lengths.tolist()  # @tolist_lengths
    return torch.stack([x[i, :n].mean(0) for i, n in enumerate(lens)])


def equal_branch(a, b):
    if torch.equal(a, b):  # @equal_branch
        return a * 2
    return a - b


def float_norm_scale(x):
    return x / float(x.norm())  # @float_norm


def empty_input_shortcut(x):
    if x.numel() == 0:  # @empty_shortcut
        return x
    return x.softmax(-1)


def nelement_average(x):
    """Normalizing by the element count read as a Python number."""
    n = x.nelement()
    return x.sum() / n if n > 4 else x.sum()  # @nelement


def sqrt_head_dim(q, k):
    """Attention scaling by math.sqrt(head_dim): float math on a size."""
    return (q @ k.transpose(-1, -2)) / math.sqrt(q.size(-1))  # @sqrt_head_dim


def mask_any(x, mask):
    if mask.any():  # @mask_any
        x = x.masked_fill(mask, 0.0)
    return x * 3


def odd_channels(x):
    half = x.shape[1] // 2
    if half * 2 != x.shape[1]:  # @odd_channels
        x = F.pad(x, (0, 0, 0, 1))
        half += 1
    a, b = x[:, :half], x[:, half:]
    return a * torch.sigmoid(b)


def unbatched_input(x):
    """Audio / vision models accept unbatched inputs: ``if x.ndim == 2: x = x.unsqueeze(0)``."""
    if x.ndim == 2:  # @unbatched
        x = x.unsqueeze(0)
    return x.cumsum(1)


def rotate_half(x):
    """Rotary embeddings: the last dim halved, through an ellipsis index."""
    x1 = x[..., : x.shape[-1] // 2]  # @rotate_half
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def max_length_mask(x, lengths):
    max_len = int(lengths.max())  # @max_len
    mask = torch.arange(max_len)[None, :] < lengths[:, None]
    return x[:, :max_len] * mask


def interpolate_pos_encoding(tokens, pos):
    """ViT: resize the position table when the number of patches differs from the trained one."""
    n = tokens.shape[1]
    if n == pos.shape[1]:  # @pos_encoding
        return tokens + pos
    side = int(math.sqrt(pos.shape[1]))
    grid = pos.reshape(1, side, side, -1).permute(0, 3, 1, 2)
    new = int(math.sqrt(n))
    grid = F.interpolate(grid, size=(new, new), mode="bilinear", align_corners=False)
    return tokens + grid.permute(0, 2, 3, 1).reshape(1, n, -1)


def bucketed_positions(x):
    """T5-style: the number of buckets from a Python log of the length."""
    n_buckets = int(math.log2(x.size(1))) + 1  # @log_buckets
    return x[:, :n_buckets].sum(1)


def clamp_by_item_threshold(x, thr):
    t = thr.item()  # @threshold_item
    return x.clamp(min=-t, max=t)


def chunked_loop(x):
    """Chunked attention / feed-forward: a Python loop over chunks of the sequence."""
    chunks = []
    for start in range(0, x.size(1), 2):  # @chunk_loop
        chunks.append(x[:, start:start + 2].mean(1, keepdim=True))
    return torch.cat(chunks, 1)


class TrainingBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if self.training:
            return self.lin(x) * 0.5
        return self.lin(x)


def ids(*values):
    return torch.tensor(values)


CASES = [
    Case("size_branch", size_branch, (r(5, 2),), [(r(2, 2),), (r(7, 2),), (r(3, 2),)]),
    Case("value_branch", value_branch, (torch.tensor([1.0, 2.0, 3.0]),),
         [(torch.tensor([-3.0, -1.0, -2.0]),), (torch.tensor([4.0, 0.5, 1.0]),)]),
    Case("data_slice", data_slice, (r(6, 2), ids(1, 1, 0, 1)), [(r(6, 2), ids(1, 1, 1, 1)), (r(6, 2), ids(1, 0, 0, 1))]),
    Case("range_loop", range_loop, (r(3, 4),), [(r(5, 4),), (r(3, 4),), (r(2, 4),)]),
    Case("item_scale", item_scale, (r(4),), [(r(4),), (r(6),)]),
    Case("tf_same_padding", TFSamePadConv, (r(1, 2, 32, 32),), [(r(1, 2, 33, 33),), (r(2, 2, 32, 32),), (r(1, 2, 35, 34),)],
         guard_fails=False),   # the padding math is recorded (trace/symfloat.py)
    Case("causal_decode", causal_decode_step, (r(1, 2, 1, 8), r(1, 2, 5, 8), r(1, 2, 5, 8)),
         [(r(1, 2, 3, 8), r(1, 2, 3, 8), r(1, 2, 3, 8)), (r(1, 2, 1, 8), r(1, 2, 9, 8), r(1, 2, 9, 8))]),
    Case("rank_reduce", rank_reduce, (r(3, 4),), [(r(2, 3, 4),), (r(5, 6),)]),
    Case("elementwise_other_rank", elementwise, (r(3, 4),), [(r(2, 3, 4),), (r(5,),)], guard_fails=False,
         jit_stale=False),
    Case("extended_mask", extended_mask, (r(2, 2, 5, 5), torch.ones(2, 5)),
         [(r(2, 2, 5, 5), torch.ones(2, 5, 5).tril()), (r(2, 2, 5, 5), torch.ones(2, 5))]),
    Case("cache_length", cache_length_branch, (r(1, 4, 8), r(1, 4, 8)),
         [(r(1, 1, 8), r(1, 5, 8)), (r(1, 3, 8), r(1, 3, 8))]),
    Case("interpolate_scale", interpolate_scale, (r(1, 1, 4, 4),), [(r(1, 1, 4, 6),), (r(1, 1, 5, 4),)]),
    Case("window_pad", WindowPad, (r(1, 8, 8, 3),), [(r(1, 7, 9, 3),), (r(2, 8, 12, 3),)], tol=1e-4),
    Case("iterate_rows", iterate_rows, (r(3, 4),), [(r(5, 4),), (r(3, 2),)]),
    Case("tolist_lengths", tolist_lengths, (r(2, 5, 3), ids(2, 4)), [(r(2, 5, 3), ids(5, 1)), (r(2, 5, 3), ids(2, 4))]),
    Case("equal_branch", equal_branch, (torch.ones(3), torch.ones(3)), [(r(3), r(3)), (torch.ones(3), torch.ones(3))]),
    Case("float_norm", float_norm_scale, (r(4),), [(r(4),)]),
    Case("empty_shortcut", empty_input_shortcut, (torch.empty(0, 3),), [(r(2, 3),), (torch.empty(0, 3),)]),
    Case("nelement", nelement_average, (r(2, 3),), [(r(2, 2),), (r(3, 3),)]),
    Case("sqrt_head_dim", sqrt_head_dim, (r(1, 3, 8), r(1, 3, 8)), [(r(1, 3, 16), r(1, 3, 16)), (r(2, 4, 8), r(2, 4, 8))]),
    Case("mask_any", mask_any, (r(2, 3), torch.zeros(2, 3, dtype=torch.bool)),
         [(r(2, 3), torch.eye(2, 3, dtype=torch.bool)), (r(2, 3), torch.zeros(2, 3, dtype=torch.bool))]),
    Case("odd_channels", odd_channels, (r(2, 4, 3),), [(r(2, 5, 3),), (r(2, 6, 3),)]),
    Case("unbatched", unbatched_input, (r(3, 4),), [(r(2, 3, 4),), (r(5, 2),)]),
    Case("rotate_half", rotate_half, (r(2, 3, 8),), [(r(2, 8),), (r(1, 2, 3, 6),)]),
    Case("max_len", max_length_mask, (r(2, 6), ids(3, 5)), [(r(2, 6), ids(6, 2)), (r(2, 6), ids(5, 1))]),
    Case("pos_encoding", interpolate_pos_encoding, (r(1, 16, 4), r(1, 16, 4)),
         [(r(1, 9, 4), r(1, 16, 4)), (r(1, 16, 4), r(1, 16, 4))], tol=1e-5),
    Case("log_buckets", bucketed_positions, (r(2, 8),), [(r(2, 16),), (r(2, 9),)]),
    Case("threshold_item", clamp_by_item_threshold, (r(6), torch.tensor(0.5)), [(r(6), torch.tensor(1.5))]),
    Case("chunk_loop", chunked_loop, (r(2, 4, 3),), [(r(2, 6, 3),), (r(2, 5, 3),)]),
]
