"""Boundary patterns, part 3: a traced size (or float math on sizes) handed to numpy.

numpy converts an int subclass to C without asking it, so these froze a size without a guard before
trace/numpy_reads.py. Imported by boundary_patterns.py, which holds the cases; the line whose guard must
fail is marked ``# @<case name>``. Kinds: array creation (``arange``, ``zeros``, ``full``, ``linspace``,
``tril``), signal windows and FFT frequencies (audio front-ends), math on sizes through ufuncs
(``np.sqrt(d)`` attention scaling, ``np.log2`` power-of-two padding, a ufunc on float math), reductions of
a shape (``np.prod(x.shape)``), a seeded ``np.random.default_rng`` drawing ``size=n``, and sizes nested in
lists or keyword tuples. Part 4 (issue #20's numpy gaps): methods of numpy arrays and scalars given a size
(``arr.reshape(n, -1)``, chained after a call, ``repeat``, ``take``, ``np.float64(2).__pow__(n)``), numpy
functions bound before the trace (``from numpy import zeros``), numpy's scalar types on a size or a tensor
(``np.float32(n)``, ``np.int64(n)``, ``np.float32(t)``), ndarray methods on arrays made from traced values
(``np.asarray(x).sum()``, ``.tolist()``, ``.item()``), ``numpy.ma``, ``numpy.polynomial`` and ``numpy.fft``
on ``x.numpy()``.
"""
from __future__ import annotations

import numpy as np
import torch
from numpy import linspace, zeros   # bound before any trace: not numpy_reads' stand-ins (numpy_calls.py)


def numpy_arange(x):
    idx = np.arange(x.size(0))  # @numpy_arange
    return x * float(idx.sum())


def numpy_zeros_shape(x):
    buf = np.zeros((x.size(0), 2))  # @numpy_zeros_shape
    return x.sum() * buf.size


def numpy_full(x):
    w = np.full(x.size(0), 0.5)  # @numpy_full
    return x * torch.from_numpy(w).float()


def numpy_linspace_kwarg(x):
    ramp = np.linspace(0.0, 1.0, num=x.size(-1))  # @numpy_linspace_kwarg
    return x * torch.from_numpy(ramp).float()


def numpy_prod_shape(x):
    count = np.prod(x.shape)  # @numpy_prod_shape
    return x / float(count)


def numpy_sqrt_scale(q):
    """attention's 1 / sqrt(d) written with numpy"""
    return q / np.sqrt(q.size(-1))  # @numpy_sqrt_scale


def numpy_log2_pad(x):
    padded = int(2 ** np.ceil(np.log2(x.size(0))))  # @numpy_log2_pad
    return x.sum() * padded


def numpy_ufunc_traced_float(x):
    half = np.ceil(x.size(0) / 2)  # @numpy_ufunc_traced_float
    return x.sum() * float(half)


def numpy_array_times_size(x):
    w = np.ones(2) * x.size(0)  # @numpy_array_times_size
    return x.sum() * float(w.sum())


def numpy_seeded_rng(x):
    noise = np.random.default_rng(0).standard_normal(size=x.shape[0])  # @numpy_seeded_rng
    return x + torch.from_numpy(noise).float()


def numpy_tril_mask(x):
    mask = np.tril(np.ones((x.size(-1), x.size(-1))))  # @numpy_tril_mask
    return x @ torch.from_numpy(mask).float()


def numpy_hanning_window(x):
    window = np.hanning(x.size(-1))  # @numpy_hanning_window
    return x * torch.from_numpy(window).float()


def numpy_fft_freq(x):
    freqs = np.fft.rfftfreq(x.size(-1))  # @numpy_fft_freq
    return x.sum() * float(freqs.sum())


def numpy_nested_list(x):
    table = np.array([[1.0, x.size(0)]])  # @numpy_nested_list
    return x.sum() * float(table.sum())


def numpy_pad_width_kwarg(x):
    padded = np.pad(np.ones(2), pad_width=(0, x.size(0)))  # @numpy_pad_width_kwarg
    return x.sum() * padded.size


# ---- part 4: the numpy gaps of issue #20 ------------------------------------------------------------------
def numpy_method_reshape(x):             # a buffer reshaped to (n, -1): an ndarray method reads n itself
    buf = np.ones(12)
    return x * float(buf.reshape(x.size(0) // 2, -1).shape[1])  # @numpy_method_reshape


def numpy_method_chained(x):             # the receiver is a call: found through its callee
    return x * float(np.ones(12).astype(np.float32).reshape(-1, x.size(0) // 2).shape[0])  # @numpy_method_chained


def numpy_method_repeat(x):
    base = np.array([1.0, 2.0])
    return x * float(base.repeat(x.size(0)).sum())  # @numpy_method_repeat


def numpy_method_take(x):
    table = np.arange(10.0) ** 2
    return x * float(table.take(x.size(0)))  # @numpy_method_take


def numpy_scalar_method(x):
    return x * float(np.float64(2.0).__pow__(x.size(0)))  # @numpy_scalar_method


def numpy_bound_zeros(x):                # `from numpy import zeros` at import time
    return x + float(zeros(x.size(0)).size)  # @numpy_bound_zeros


def numpy_bound_linspace(x):
    return x * float(linspace(0, 1, x.size(0))[1])  # @numpy_bound_linspace


def numpy_float32_size(x):
    return x * float(np.float32(x.size(0)) / 3)  # @numpy_float32_size


def numpy_int64_size(x):
    return x * int(np.int64(x.size(0)) * 2)  # @numpy_int64_size


def numpy_float32_tensor(x):
    return x * float(np.float32(x.sum()))  # @numpy_float32_tensor


def numpy_asarray_sum(x):
    return x * float(np.asarray(x).sum())  # @numpy_asarray_sum


def numpy_asarray_tolist(x):
    return x * np.asarray(x).tolist()[0]  # @numpy_asarray_tolist


def numpy_asarray_item(x):
    return x * np.asarray(x[:1]).item()  # @numpy_asarray_item


def numpy_ma_masked(x):
    return x * float(np.ma.masked_less(np.arange(x.size(0)), 2).sum())  # @numpy_ma_masked


def numpy_polyval_size(x):
    return x * float(np.polynomial.polynomial.polyval(x.size(0), [1.0, 2.0]))  # @numpy_polyval_size


def numpy_polynomial_class(x):
    return x * float(np.polynomial.Polynomial([1.0, 2.0])(x.size(0)))  # @numpy_polynomial_class


def numpy_fft_of_values(x):
    return x * float(np.abs(np.fft.fft(x.numpy())).sum())  # @numpy_fft_of_values


def numpy_fft_length(x):
    return x * float(np.abs(np.fft.rfft(x.numpy(), n=x.size(0) * 2)).sum())  # @numpy_fft_length
