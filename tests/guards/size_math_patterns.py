"""More guard patterns (same ``Case`` shape as patterns.py): sizes used as list / tuple / dict /
ModuleList indices, and float math on sizes.

Index reads must guard ``index == value`` at the marked line (CPython never asks an int subclass
for ``__index__`` when it indexes a list). Float math on sizes (``h / 2``, ``math.ceil``, ``max``,
``round``) is recorded, so those cases run on every new size with no guard failing
(``guard_fails=False``); a float that reaches ``int()`` or a comparison is guarded.
"""
from __future__ import annotations

import math

import torch.nn.functional as F
from torch import nn

from patterns import Case, r

SCALES = (0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0)
TABLE = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]
BY_LENGTH = {2: 0.25, 3: 0.5, 4: 0.75, 5: 1.5, 6: 2.5}


# ---- sizes as indices ---------------------------------------------------------------------------
class LayerPerBatch(nn.Module):
    """A layer chosen by a size: ``self.layers[x.size(0) - 1]``."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(6)])

    def forward(self, x):
        return self.layers[x.size(0) - 1](x)  # @module_list_index


class StagePerLength(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.Sequential(*[nn.Linear(3, 3) for _ in range(6)])

    def forward(self, x):
        stage = self.stages[x.shape[1]]  # @sequential_index
        return stage(x)


def list_index(x):
    return x * TABLE[x.shape[-1] - 1]  # @list_index


def tuple_index(x):
    n = x.size(0)
    scale = SCALES[n]  # @tuple_index
    return x * scale


def dict_lookup(x):
    return x * BY_LENGTH[x.size(1)]  # @dict_lookup


def list_slice(x):
    return x * sum(TABLE[: x.size(0)])  # @list_slice


# ---- float math on sizes: recorded --------------------------------------------------------------
class TFSamePad224(nn.Module):
    """TF 'SAME' padding as EfficientNet / MobileNet ports write it (with dilation)."""

    def __init__(self, k=3, s=2, d=1):
        super().__init__()
        self.k, self.s, self.d = k, s, d
        self.conv = nn.Conv2d(1, 2, k, stride=s, dilation=d)

    def forward(self, x):
        h, w = x.shape[-2:]
        k, s, d = self.k, self.s, self.d
        pad_h = max((math.ceil(h / s) - 1) * s + (k - 1) * d + 1 - h, 0)
        pad_w = max((math.ceil(w / s) - 1) * s + (k - 1) * d + 1 - w, 0)
        x = F.pad(x, [pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2])
        return self.conv(x)


def pad_to_multiple(x):
    """Pad the length up to a multiple of 8 (``math.ceil(h / 8) * 8``)."""
    n = x.size(1)
    target = math.ceil(n / 8) * 8
    return F.pad(x, (0, target - n))


def floor_half(x):
    half = math.floor(x.size(-1) / 2)
    return x[..., :half] - x[..., half: 2 * half]


def rounded_third(x):
    k = round(x.size(1) / 3)
    return x[:, :k].sum(1)


def float_scale(x):
    """A float from sizes used as a number in an op: ``x * (h / 2)``."""
    return x * (x.size(0) / 2) + x.size(1) * 0.5


def min_of_sizes(x, y):
    m = min(x.size(0), y.size(0))
    return x[:m] + y[:m]


def int_of_half(x):
    """``int(h * 0.5)``: CPython makes __int__'s result a plain int, so the value is guarded."""
    n = int(x.size(0) * 0.5)  # @int_of_half
    return x[:n]


def sqrt_of_half(x):
    """math.sqrt reads a float subclass's value directly: the traced float is guarded there."""
    s = math.sqrt(x.size(1) / 2)  # @sqrt_of_half
    return x * s


def aspect_branch(x):
    if x.size(-1) / x.size(-2) > 1.5:  # @aspect_branch
        return x.flip(-1)
    return x * 2


CASES = [
    Case("module_list_index", LayerPerBatch, (r(2, 4),), [(r(3, 4),), (r(2, 4),), (r(5, 4),)]),
    Case("sequential_index", StagePerLength, (r(2, 3, 3),), [(r(2, 4, 3),), (r(1, 3, 3),)]),
    Case("list_index", list_index, (r(2, 3),), [(r(2, 5),), (r(4, 3),)]),
    Case("tuple_index", tuple_index, (r(2, 3),), [(r(3, 3),), (r(2, 7),)]),
    Case("list_slice", list_slice, (r(2, 3),), [(r(4, 3),), (r(2, 6),)]),
    Case("tf_same_pad_224", TFSamePad224, (r(1, 1, 224, 224),),
         [(r(1, 1, 225, 225),), (r(1, 1, 231, 160),), (r(1, 1, 160, 231),)], guard_fails=False, tol=1e-4),
    Case("pad_to_multiple", pad_to_multiple, (r(2, 16),), [(r(2, 17),), (r(2, 30),), (r(2, 3),)], guard_fails=False),
    Case("floor_half", floor_half, (r(2, 8),), [(r(2, 9),), (r(2, 12),)], guard_fails=False),
    Case("float_scale", float_scale, (r(2, 3),), [(r(5, 3),), (r(3, 8),)], guard_fails=False, jit_stale=False),
    Case("min_of_sizes", min_of_sizes, (r(3, 2), r(5, 2)), [(r(6, 2), r(4, 2)), (r(2, 2), r(2, 2))],
         guard_fails=False),
    Case("int_of_half", int_of_half, (r(4, 2),), [(r(5, 2),), (r(6, 2),)]),
    Case("sqrt_of_half", sqrt_of_half, (r(2, 8),), [(r(2, 18),), (r(3, 8),)]),
    Case("aspect_branch", aspect_branch, (r(1, 4, 8),), [(r(1, 4, 4),), (r(1, 8, 20),)]),
]
