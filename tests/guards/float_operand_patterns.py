"""A traced size given to a builtin next to an operand that is not an int: CPython's float (and int)
arithmetic inside ``pow`` / ``divmod`` / ``sum`` / ``math.prod`` reads the size's digits without asking it.
Each function's answer moves with the last dimension; the marked line is where the size is read."""
from __future__ import annotations

import math

import torch
from torch import nn


def float_pow(x):
    return x * pow(1.5, x.shape[-1])   # @float_pow


def mod_pow(x):
    return x * pow(3, x.shape[-1], 5)   # @mod_pow


def float_divmod(x):
    return x * divmod(7.0, x.shape[-1])[0]   # @float_divmod


def int_divmod(x):
    return x * divmod(7, x.shape[-1])[1]   # @int_divmod


def float_sum(x):
    return x * sum([0.5, x.shape[-1]])   # @float_sum


def float_prod(x):
    return x * math.prod([0.5, x.shape[-1]])   # @float_prod


def int_sum_view(x):
    """Int-only: stays recorded (no guard), the view follows the batch."""
    return x.view(sum([x.shape[0], 0]), -1)


class LengthPenalty(nn.Module):
    """transformers' ExponentialDecayLengthPenalty: ``pow(self.regulation_factor, cur_len - start)``."""

    def __init__(self, start: int = 3, factor: float = 1.5):
        super().__init__()
        self.start, self.factor = start, factor

    def forward(self, ids, scores):
        cur_len = ids.shape[-1]
        if cur_len > self.start:
            return scores * pow(self.factor, cur_len - self.start)   # @penalty
        return scores


FUNCTIONS = [(float_pow, "float_pow"), (mod_pow, "mod_pow"), (float_divmod, "float_divmod"),
             (int_divmod, "int_divmod"), (float_sum, "float_sum"), (float_prod, "float_prod")]


# ---- operators whose other operand's own arithmetic reads the size (trace/operand_scan.py) ------
def float_times(x):
    return x * (0.5 * x.shape[-1])   # @float_times


def float_over(x):
    n = x.shape[-1]
    k = 1.0 / n   # @float_over
    return x * k


def float_below(x):
    if 3.5 < x.shape[-1]:   # @float_below
        return x * 2
    return x


def chained(x):
    if 1.5 < x.shape[-1] < 4.5:   # @chained
        return x * 2
    return x


def repeated(x):
    return x * torch.tensor([1.0] * x.shape[-1]).sum()   # @repeated


def bool_plus(x):
    return x * (True + x.shape[-1])   # @bool_plus


def augmented(x):
    acc = 0.5
    acc *= x.shape[-1]   # @augmented
    return x * acc


class ScaledBySize(nn.Module):
    def __init__(self, scale: float = 0.5):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * (self.scale ** x.shape[-1])   # @attr_pow


def in_floats(x):
    if x.shape[-1] in (3.0, 4.0):   # @in_floats
        return x * 2
    return x


OPERATORS = [(float_times, "float_times"), (float_over, "float_over"), (float_below, "float_below"),
             (chained, "chained"), (repeated, "repeated"), (bool_plus, "bool_plus"), (augmented, "augmented"),
             (ScaledBySize(), "attr_pow"), (in_floats, "in_floats")]


def size_first(x):
    """The size on the left: recorded float math, no guard (symfloat.py)."""
    return x[:, : math.ceil(x.shape[-1] * 0.5)] * (x.shape[-1] / 2)
