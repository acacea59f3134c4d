"""Boundary patterns, part 2: a traced size (or float math on sizes) escaping into a plain Python value.

Imported by boundary_patterns.py, which holds the cases; the line whose guard must fail is marked
``# @<case name>`` here. Sources: power-of-two padding with ``bit_length`` (timm / research code),
f-string keyed ``ModuleDict`` heads, ``lru_cache``d plans keyed by a shape, ``np.linspace``
schedules, and attacks on the rule over every ``int`` / ``float`` method.
"""
from __future__ import annotations

import functools
import math
import operator

import numpy as np
import torch
from torch import nn


# ---- a traced size escapes into a plain int ------------------------------------------------------
def bit_length_bucket(x):
    n = x.size(0)
    bucket = 1 << (n - 1).bit_length()  # @bit_length_bucket
    return x.sum() * bucket


def operator_index_repeat(x):
    n = operator.index(x.size(0))  # @operator_index_repeat
    return x * torch.tensor([1.0] * n)[:, None].sum()


def list_repeat(x):
    w = [1.0] * x.size(0)  # @list_repeat
    return x.sum() * len(w)


def str_repeat(x):
    s = "ab" * x.size(0)  # @str_repeat
    return x.sum() * len(s)


def invert_size(x):
    return x.sum() * ~x.size(0)  # @invert_size


def size_in_set(x):
    if x.size(0) in {4, 8}:  # @size_in_set
        return x * 2
    return x


def size_dict_get(x):
    scale = {4: 2.0, 8: 3.0}.get(x.size(0), 1.0)  # @size_dict_get
    return x * scale


def size_dict_key_in(x):
    table = {5: "wide"}
    if x.size(1) in table:  # @size_dict_key_in
        return x * 2
    return x


class HeadsByWidth(nn.Module):
    """A ModuleDict keyed by an f-string of the input width (multi-resolution heads)."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({f"head_{w}": nn.Linear(w, 2) for w in (3, 5)})

    def forward(self, x):
        return self.heads[f"head_{x.size(-1)}"](x)  # @heads_by_width


class GetattrByWidth(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj_3 = nn.Linear(3, 2)
        self.proj_5 = nn.Linear(5, 2)

    def forward(self, x):
        return getattr(self, "proj_" + str(x.size(-1)))(x)  # @getattr_by_width


@functools.lru_cache(maxsize=8)
def _plan(key: str) -> float:
    return float(len(key))


def lru_cache_plan(x):
    return x * _plan(str(tuple(x.shape)))  # @lru_cache_plan


def lru_cache_int_key(x):
    return x * _plan_int(x.size(0))  # @lru_cache_int_key


@functools.lru_cache(maxsize=8)
def _plan_int(n: int) -> float:
    return math.sqrt(n)


def np_linspace_schedule(x):
    sched = np.linspace(0.0, 1.0, x.size(0))  # @np_linspace_schedule
    return x * torch.from_numpy(sched).float()[:, None]


def to_bytes_key(x):
    b = x.size(0).to_bytes(2, "little")  # @to_bytes_key
    return x * b[0]


def parity_and(x):
    return x * (x.size(0) & 1)  # @parity_and


def reflected_lshift(x):
    return x.sum() * (1 << x.size(0))  # @reflected_lshift


def reflected_and(x):
    return x.sum() * (6 & x.size(0))  # @reflected_and


def reflected_divmod(x):
    q, rem = divmod(64, x.size(0))  # @reflected_divmod
    return x.sum() * q + rem


def hash_of_size(x):
    return x * (hash(x.size(0)) % 3)  # @hash_of_size


def as_integer_ratio(x):
    num, _ = x.size(0).as_integer_ratio()  # @as_integer_ratio
    return x * num


def bit_count_power_of_two(x):
    if x.size(0).bit_count() == 1:  # @bit_count_power_of_two
        return x * 2
    return x


def format_width(x):
    tag = format(x.size(0), "03d")  # @format_width
    return x * int(tag[-1])


def repr_of_size(x):
    return x * len(repr(x.size(0)))  # @repr_of_size


def size_sizeof(x):
    n = (x.size(0) * 2 ** 58).__sizeof__()  # @size_sizeof
    return x * (n > 32)


def float_of_traced_float(x):
    h = float(x.size(0) / 2)  # @float_of_traced_float
    return x * torch.tensor(h)


def traced_float_hex(x):
    return x * int((x.size(0) / 3).hex()[4], 16)  # @traced_float_hex


def traced_float_is_integer(x):
    if (x.size(0) / 2).is_integer():  # @traced_float_is_integer
        return x * 2
    return x


def traced_float_hash(x):
    table = {1.5: 3.0}
    return x * table.get(x.size(0) / 2, 1.0)  # @traced_float_hash


def traced_float_str(x):
    return x * len(str(x.size(0) / 4))  # @traced_float_str


def explicit_index_call(x):
    n = x.size(0).__index__()  # @explicit_index_call
    return x * torch.arange(n)


def copy_of_size(x):
    import copy
    n = copy.copy(x.size(0))  # @copy_of_size
    return x * torch.ones(n).sum()


def size_conjugate(x):
    return x.view(x.size(0).conjugate(), -1) * x.size(0).real


def int_of_real(x):
    return x.reshape(x.size(0).numerator, -1)
