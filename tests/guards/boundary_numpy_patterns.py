"""Boundary patterns, part 3: a traced size (or float math on sizes) handed to numpy.

numpy converts an int subclass to C without asking it, so these froze a size without a guard before
trace/numpy_reads.py. Imported by boundary_patterns.py, which holds the cases; the line whose guard must
fail is marked ``# @<case name>``. Kinds: array creation (``arange``, ``zeros``, ``full``, ``linspace``,
``tril``), signal windows and FFT frequencies (audio front-ends), math on sizes through ufuncs
(``np.sqrt(d)`` attention scaling, ``np.log2`` power-of-two padding, a ufunc on float math), reductions of
a shape (``np.prod(x.shape)``), a seeded ``np.random.default_rng`` drawing ``size=n``, and sizes nested in
lists or keyword tuples.
"""
from __future__ import annotations

import numpy as np
import torch


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
