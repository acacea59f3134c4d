"""Constant arguments the kernels of sized ops refuse, said before they run (hostile-file round 25).

Like op_sizes_constants.py (rounds 20-21): a file's upsampling size of 0 or below, a negative adaptive pooling
size, cdist's compute_mode 7 or a negative p, stft's hop of 0 or window longer than n_fft, im2col / col2im's
kernel, dilation or stride of 0 or a negative padding, histc's min above its max, quantile's q outside [0, 1],
and a circular padding that wraps more than once loaded and raised the kernel's RuntimeError at the first
call. Each check here raises ValueError, which is a LoadError at load (the traced shapes:
op_checks.check_sizes) and a GuardError at a call whose check runs. size_rules.py puts each in front of the
op's element rule (``refusing``), so the op keeps one rule.

Values a check cannot see yet (a traced int at load) pass: the call-time check sees them.
"""
from __future__ import annotations

import math

from .op_sizes import _ints, _per_dim, _shape


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def upsampled(b) -> None:
    """upsample_*: every output size positive; scale factors positive and finite."""
    out = _ints(b.get("output_size"))
    if out is not None and any(s <= 0 for s in out):
        raise ValueError(f"output size {out} must be positive")
    scales = b.get("scale_factors", b.get("scale_factor"))
    scales = [scales] if _number(scales) else scales
    if isinstance(scales, (list, tuple)) and any(_number(s) and not (math.isfinite(s) and s > 0) for s in scales):
        raise ValueError(f"scale factors {list(scales)} must be positive and finite")


def antialiased(b) -> None:
    """_upsample_*_aa: as ``upsampled``, and no explicit ``scales_h`` / ``scales_w``: the antialiased kernel reads
    a window as wide as the scale says, which only the output size (or scale factors that make it) may set."""
    upsampled(b)
    given = [k for k in ("scales_h", "scales_w") if b.get(k) is not None]
    if given:
        raise ValueError(f"an antialiased resize with explicit {' and '.join(given)} (its window would follow them, "
                         f"not the output size)")


def adaptive_pooled(b) -> None:
    """adaptive_*_pool: no negative output size."""
    out = _ints(b.get("output_size"))
    if out is not None and any(s < 0 for s in out):
        raise ValueError(f"output size {out} must not be negative")


def cdist_args(b) -> None:
    """cdist: p non-negative (not NaN), compute_mode None or 0 to 2."""
    p, mode = b.get("p", 2.0), b.get("compute_mode")
    if _number(p) and not p >= 0:
        raise ValueError(f"p {p} must be non-negative")
    if _number(mode) and mode not in (0, 1, 2):
        raise ValueError(f"compute_mode {mode} must be 0, 1 or 2")


def stft_args(b) -> None:
    """stft / istft: n_fft and hop_length positive, win_length between 1 and n_fft."""
    n_fft, hop, win = b.get("n_fft"), b.get("hop_length"), b.get("win_length")
    if _number(n_fft) and n_fft <= 0:
        raise ValueError(f"n_fft {n_fft} must be positive")
    if _number(hop) and hop <= 0:
        raise ValueError(f"hop_length {hop} must be positive")
    if _number(win) and (win <= 0 or (_number(n_fft) and win > n_fft)):
        raise ValueError(f"win_length {win} must be between 1 and n_fft ({n_fft})")


def windowed(b) -> None:
    """im2col / col2im: kernel, dilation and stride positive, padding non-negative."""
    for name, low in (("kernel_size", 1), ("dilation", 1), ("stride", 1), ("padding", 0)):
        v = _per_dim(b.get(name), 2)
        if v is not None and any(x < low for x in v):
            raise ValueError(f"{name} {v} must be {'positive' if low else 'non-negative'}")


def col2im_blocks(b) -> None:
    """col2im (fold): kernel, dilation and stride positive, padding non-negative (``windowed``); the input 2-D or
    3-D, its dim -2 a multiple of the kernel's elements and its dim -1 the number of sliding blocks output_size
    makes (round 26: a file's output_size loaded and the kernel refused it at the first call)."""
    windowed(b)
    x, out = _shape(b.get("self")), _ints(b.get("output_size"))
    k, d, p, s = (_per_dim(b.get(n), 2) for n in ("kernel_size", "dilation", "padding", "stride"))
    if x is None or out is None or None in (k, d, p, s):
        return
    if len(x) not in (2, 3):
        raise ValueError(f"the input {list(x)} must have 2 or 3 dimensions")
    if x[-2] % (k[0] * k[1]):
        raise ValueError(f"the input's dim -2 ({x[-2]}) must be a multiple of the kernel's {k[0] * k[1]} elements")
    blocks = [(out[i] + 2 * p[i] - (d[i] * (k[i] - 1) + 1)) // s[i] + 1 for i in range(2)]
    if min(blocks) < 1 or blocks[0] * blocks[1] != x[-1]:
        raise ValueError(f"output_size {out} (kernel {k}, dilation {d}, padding {p}, stride {s}) makes "
                         f"{blocks[0]} x {blocks[1]} sliding blocks, but the input's last dimension holds {x[-1]}")


def histogram_range(b) -> None:
    """histc: min at most max (both 0: the data's range)."""
    low, high = b.get("min", 0), b.get("max", 0)
    if _number(low) and _number(high) and low > high:
        raise ValueError(f"min {low} must not be larger than max {high}")


def quantile_q(b) -> None:
    """quantile / nanquantile: a number q within [0, 1]."""
    q = b.get("q")
    if _number(q) and not 0 <= q <= 1:
        raise ValueError(f"q {q} must be in [0, 1]")


def circular_padded(b) -> None:
    """pad(mode="circular"): each side at most the size of the dimension it wraps."""
    if b.get("mode") != "circular":
        return
    pads, shape = _ints(b.get("pad")), _shape(b.get("self"))
    if pads is None or shape is None:
        return
    for i in range(min(len(pads) // 2, len(shape))):
        n = shape[-1 - i]
        if max(pads[2 * i], pads[2 * i + 1]) > n:
            raise ValueError(f"circular padding {pads} wraps dimension {len(shape) - 1 - i} of size {n} more than once")


def refusing(check, elements):
    """The element rule ``elements`` with ``check`` first (a ValueError says what the kernel would refuse)."""
    def rule(b):
        check(b)
        return elements(b)
    rule.__doc__ = f"{check.__doc__} Then: {elements.__doc__ or elements.__name__}"
    return rule
