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
    check_shifts(shifts)
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


# ---- round 21: index, count and window constants of views and selections ----------------------------------
ROLL_SHIFT_MAX = 2 ** 62   # |shift| beyond: torch's roll fails on -2**63 after ~1 CPU s in its error path


def _dim_size(x, dim, what: str = "dim") -> int:
    """The size of ``x`` along ``dim`` (a 0-d input counts as one dimension of size 1, as ATen wraps it)."""
    rank = max(len(x), 1)
    if not -rank <= dim < rank:
        raise ValueError(f"{what} {dim} out of range for an input of {len(x)} dimensions")
    return x[dim] if x else 1


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def narrowed(b):
    """narrow / narrow_copy: ``start`` within [-n, n] and ``start + length`` within n, ``length`` >= 0."""
    x, dim, start, length = _shape(b.get("self")), b.get("dim"), b.get("start"), b.get("length")
    if x is None or not (_int(dim) and _int(start) and _int(length)):
        return None
    if not x:
        raise ValueError("narrow cannot be applied to a 0-dimensional input")
    n = _dim_size(x, dim)
    if not -n <= start <= n:
        raise ValueError(f"start {start} out of range for dimension {dim} of size {n}")
    if length < 0:
        raise ValueError(f"length {length} must be non-negative")
    if (start % n if n and start < 0 else start) + length > n:
        raise ValueError(f"start {start} + length {length} exceeds dimension {dim} of size {n}")
    return _numel(x)


def selected(b):
    """select.int: ``index`` within [-n, n)."""
    x, dim, index = _shape(b.get("self")), b.get("dim"), b.get("index")
    if x is None or not (_int(dim) and _int(index)):
        return None
    if not x:
        raise ValueError("select cannot be applied to a 0-dimensional input")
    n = _dim_size(x, dim)
    if not -n <= index < n:
        raise ValueError(f"index {index} out of range for dimension {dim} of size {n}")
    return _numel(x)


def top_k(b, low: int):
    """topk (``low`` 0): ``k`` within [0, n]; kthvalue (``low`` 1): within [1, n] (n: the size along ``dim``)."""
    x, k, dim = _shape(b.get("self")), b.get("k"), b.get("dim", -1)
    if x is None or not (_int(k) and _int(dim)):
        return None
    n = _dim_size(x, dim)
    if not low <= k <= max(n, low):
        raise ValueError(f"k {k} out of range for dimension {dim} of size {n} (expected {low} to {max(n, low)})")
    return _numel(x)


def check_window(x, dim, size, step) -> None:
    """unfold(dimension, size, step): a dimension of the input, 0 <= size <= its size, step > 0."""
    n = _dim_size(x, dim, "dimension")
    if size < 0:
        raise ValueError(f"size {size} must be non-negative")
    if size > n:
        raise ValueError(f"size {size} is more than dimension {dim}'s {n}")
    if step <= 0:
        raise ValueError(f"step {step} must be positive")


def check_shifts(shifts) -> None:
    """roll: each shift within +-2**62 (any real shift is its remainder by the size; -2**63 fails in torch)."""
    if any(abs(s) > ROLL_SHIFT_MAX for s in shifts):
        raise ValueError(f"shifts {shifts} out of range (at most 2**62 either way)")


def differenced(b):
    """diff: the order ``n`` non-negative (its output is never more than its inputs)."""
    x, n = _shape(b.get("self")), b.get("n", 1)
    if x is None or not _int(n):
        return None
    if n < 0:
        raise ValueError(f"order n {n} must be non-negative")
    return _numel(x) + sum(_numel(_shape(b[k]) or ()) for k in ("prepend", "append") if b.get(k) is not None)


def renormed(b):
    """renorm: ``p`` positive and ``maxnorm`` non-negative."""
    x, p, maxnorm = _shape(b.get("self")), b.get("p"), b.get("maxnorm")
    if x is None:
        return None
    if isinstance(p, (int, float)) and not p > 0:
        raise ValueError(f"p {p} must be positive")
    if isinstance(maxnorm, (int, float)) and not maxnorm >= 0:
        raise ValueError(f"maxnorm {maxnorm} must be non-negative")
    return _numel(x)


def sliced(b):
    """slice.Tensor: a positive step (0 and negatives raised a raw ValueError at the call)."""
    x, step = _shape(b.get("self")), b.get("step", 1)
    if x is None:
        return None
    if _int(step) and step <= 0:
        raise ValueError(f"step {step} must be positive")
    return _numel(x)


def _unique(dims: list, rank: int, what: str) -> list:
    wrapped = [d % max(rank, 1) for d in dims]   # within the rank already (op_dims.py)
    if len(set(wrapped)) != len(wrapped):
        raise ValueError(f"{what} {dims} repeats a dimension")
    return wrapped


def permuted(b):
    """permute / permute_copy: ``dims`` a permutation of the input's dimensions."""
    x, dims = _shape(b.get("self")), _ints(b.get("dims"))
    if x is None or dims is None:
        return None
    if len(dims) != len(x):
        raise ValueError(f"dims {dims} must name each of the input's {len(x)} dimensions once")
    _unique(dims, len(x), "dims")
    return _numel(x)


def flipped(b):
    """flip: no dimension twice."""
    x, dims = _shape(b.get("self")), _ints(b.get("dims"))
    if x is None or dims is None:
        return None
    _unique(dims, len(x), "dims")
    return _numel(x)


def diagonal_taken(b):
    """diagonal: two different dimensions."""
    x, d1, d2 = _shape(b.get("self")), b.get("dim1", 0), b.get("dim2", 1)
    if x is None or not (_int(d1) and _int(d2)):
        return None
    _unique([d1, d2], len(x), "dim1, dim2")
    return _numel(x)


def moved(b):
    """movedim / moveaxis: as many sources as destinations, no dimension twice in either."""
    x, src, dst = _shape(b.get("self")), _ints(b.get("source")), _ints(b.get("destination"))
    if x is None or src is None or dst is None:
        return None
    if len(src) != len(dst):
        raise ValueError(f"source {src} and destination {dst} must have the same length")
    _unique(src, len(x), "source")
    _unique(dst, len(x), "destination")
    return _numel(x)
