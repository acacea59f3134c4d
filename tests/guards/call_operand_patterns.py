"""A traced size beside an operand that is a CALL (hunt30): ``math.sqrt(d) * n``, ``self.scale() * n``, a call in a
lambda or a comprehension on the line, ``n * make_complex()``, ``n * [1] * k``-style repetition through a call.
CPython's float (complex, Fraction, list) arithmetic of the call's result reads the size's digits without asking it;
the source scan does not run the call again (trace/operand_calls.py), so the size is guarded at the marked line
(default-deny), or the size's own method guards it where it is on the left (symbolic._declined). Each function's
answer moves with the last dimension."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch
from torch import nn


def sqrt_times(x):
    n = x.shape[-1]
    return x * (math.sqrt(4.0) * n)   # @sqrt_times


def log_over(x):
    n = x.shape[-1]
    return x * (math.log(2.0) / n)   # @log_over


def builtin_min_times(x):
    n = x.shape[-1]
    return x * (min(1.5, 2.0) * n)   # @builtin_min_times


def numpy_scalar_times(x):
    n = x.shape[-1]
    return x * float(np.float32(1.5) * n)   # @numpy_scalar_times


def call_below(x):
    n = x.shape[-1]
    return x * 2 if math.sqrt(10.0) < n else x * 3   # @call_below


def _half():
    return 0.5


def helper_times(x):
    return x * (_half() * x.size(-1))   # @helper_times


def in_comprehension(x):
    n = x.shape[-1]
    return x * sum([math.sqrt(4.0) * k for k in (n, 1)])   # @in_comprehension


def in_lambda(x):
    n = x.shape[-1]
    scale = lambda k: math.sqrt(4.0) * k   # noqa: E731  # @in_lambda
    return x * scale(n)


def _complex():
    return complex(1.5, 0.0)


def size_times_complex_call(x):
    n = x.shape[-1]
    return x * (n * _complex()).real   # @size_times_complex_call


def size_times_fraction(x):
    n = x.shape[-1]
    return x * float(n * Fraction(1, 2))   # @size_times_fraction


class MethodScale(nn.Module):
    """``self.scale() * n``: a method of the user's class, not run again by the scan."""

    def scale(self):
        return 0.25

    def forward(self, x):
        n = x.shape[-1]
        return x * (self.scale() * n)   # @method_scale


CALLS = [(sqrt_times, "sqrt_times"), (log_over, "log_over"), (builtin_min_times, "builtin_min_times"),
         (numpy_scalar_times, "numpy_scalar_times"), (call_below, "call_below"), (helper_times, "helper_times"),
         (in_comprehension, "in_comprehension"), (in_lambda, "in_lambda"),
         (size_times_complex_call, "size_times_complex_call"), (size_times_fraction, "size_times_fraction"),
         (MethodScale().eval(), "method_scale")]


def tensor_calls(x):
    """Calls declared to give a tensor (``torch.relu``, ``x.sum(-1)``, a conversion, a module) and int-valued pure
    calls (``math.ceil``): the size stays recorded, no guard."""
    n = x.shape[-1]
    lin = nn.Identity()
    return torch.relu(x) * n + x.sum(-1, keepdim=True) * n + x.float() * n + lin(x) * n + x * (math.ceil(2.5) * n) \
        + torch.arange(n).float() * n + x[0].abs() * n
