"""Constant arguments the kernels refuse, refused at load (hostile-file round 20, docs/SECURITY.md).

A file's pooling kernel, stride or dilation of 0, a padding over half the kernel, a ``pixel_shuffle`` /
``channel_shuffle`` factor of 0 or one that does not divide the channels, ``roll`` shifts and dims of
different lengths or a dim out of range loaded and then raised a raw RuntimeError at the first call. These
rules say what the kernel would say, in Python, before it runs: a ValueError, which is a LoadError at load
(the traced shapes: serialize/op_checks.check_sizes) and a GuardError at a call whose check runs. Python, not
a run of the op on meta tensors: the meta kernels of ``roll`` and the pools cost 0.3 to 1.1 ms a node, which a
file of 50,000 such nodes would turn into a minute of loading.

Each rule returns the elements the op makes (its input's, or two for a pool with indices), so the call
check can be gated by a factor of 1 or 2 (``static_factor``): what these ops make is bounded by their input.
"""
from __future__ import annotations

import math

from .op_sizes import _ints, _per_dim, _shape


def _numel(x) -> int:
    return math.prod(max(int(s), 1) for s in x)


def check_pool(x, dims: int, k, stride, pad, dil, ceil: bool = True) -> None:
    """avg / max pooling's own checks (ATen's pool2d_shape_check and pooling_output_shape) on constant lists of
    ``dims`` sizes each, ``x`` the input's shape; ``ceil``: ceil_mode (or unknown: the lenient answer)."""
    if any(v <= 0 for v in k):
        raise ValueError(f"kernel size {k} must be positive")
    if any(v <= 0 for v in stride):
        raise ValueError(f"stride {stride} must be positive")
    if any(v <= 0 for v in dil):
        raise ValueError(f"dilation {dil} must be positive")
    for kk, p, d in zip(k, pad, dil):
        if p < 0 or p > (d * (kk - 1) + 1) // 2:
            raise ValueError(f"padding {pad} must be between 0 and half the kernel {k} (dilation {dil})")
    for n, kk, s, p, d in zip(x[-dims:], k, stride, pad, dil):
        if n > 0 and (n + 2 * p - d * (kk - 1) - 1 + (s - 1 if ceil else 0)) // s + 1 < 1:
            raise ValueError(f"kernel {k} (dilation {dil}, padding {pad}) is larger than the input {list(x)}")


def pixel_shuffled(b):
    """pixel_shuffle: the upscale factor positive, the channels divisible by its square."""
    x, r = _shape(b.get("self")), b.get("upscale_factor")
    if x is None or not isinstance(r, int) or isinstance(r, bool):
        return None
    if r <= 0:
        raise ValueError(f"upscale_factor {r} must be positive")
    if len(x) < 3 or x[-3] % (r * r):
        raise ValueError(f"the input's channels ({list(x)}) must be divisible by upscale_factor^2 = {r * r}")
    return _numel(x)


def channel_shuffled(b):
    """channel_shuffle: the groups positive and dividing the channels."""
    x, g = _shape(b.get("self")), b.get("groups")
    if x is None or not isinstance(g, int) or isinstance(g, bool):
        return None
    if g <= 0:
        raise ValueError(f"groups {g} must be positive")
    if len(x) < 3 or x[1] % g:
        raise ValueError(f"the input's channels ({list(x)}) must be divisible by groups = {g}")
    return _numel(x)


def rolled(b):
    """roll: one shift per dim (or one shift and no dim), each dim inside the input's rank."""
    x, shifts, dims = _shape(b.get("self")), _ints(b.get("shifts")), _ints(b.get("dims", []))
    if x is None or shifts is None or dims is None:
        return None
    if (len(dims) or 1) != len(shifts) or (not dims and len(shifts) != 1):
        raise ValueError(f"shifts {shifts} and dims {dims} must align (one shift per dim)")
    rank = max(len(x), 1)
    if any(not -rank <= d < rank for d in dims):
        raise ValueError(f"dims {dims} out of range for an input of {len(x)} dimensions")
    return _numel(x)


def rot90ed(b):
    """rot90: two different dims inside the input's rank (at least 2)."""
    x, dims = _shape(b.get("self")), _ints(b.get("dims", [0, 1]))
    if x is None or dims is None:
        return None
    rank = len(x)
    if len(dims) != 2 or rank < 2 or any(not -rank <= d < rank for d in dims) or (dims[0] - dims[1]) % rank == 0:
        raise ValueError(f"dims {dims} must be two different dims of an input of {rank} dimensions")
    return _numel(x)


def same_size(b, constants: set):
    """static_factor of the rules above: the output has the input's elements."""
    return ("self", 1, 0) if "self" not in constants else None
