"""Size functions of ops whose output is sized by an int argument or a second tensor next to their
input: adaptive pooling to an output size, affine grids, FFT lengths and frequencies, windows,
histograms and bin counts, short-time Fourier transforms, ``unfold``'s overlapping windows, diagonal
matrices, indexing and embedding (one slice per index), full factorizations, attention's score
matrix and grid sampling.

Same contract as op_sizes.py: the op's arguments bound to their schema names, an element count as a
Python int, None while a size is unknown (a traced one, at load).
"""
from __future__ import annotations

import math

import torch

from .op_sizes_constants import check_pool, check_window
from .op_sizes import _ints, _shape


def _count(n):
    return None if _ints(n) is None else max(abs(n), 1)


def adaptive_pool(b):
    """adaptive_*_pool: the input's leading dimensions times the output size (any size, even one
    bigger than the input: each output element pools a window of the input)."""
    x, out = _shape(b.get("self")), _ints(b.get("output_size"))
    if x is None or out is None:
        return None
    lead = x[:max(len(x) - len(out), 0)]
    return math.prod(lead) * math.prod(max(abs(s), 1) for s in out) * 2   # max pools also return indices


def affine_grid(b):
    """affine_grid_generator: N x H x W (x D) points of 2 (3) coordinates."""
    size = _ints(b.get("size"))
    return None if size is None else math.prod(max(abs(s), 1) for s in size) * max(len(size) - 2, 1)


def window(b):
    """hann_window and the other windows, fft_fftfreq / fft_rfftfreq: n elements."""
    return _count(b.get("window_length", b.get("n")))


def histogram(b):
    """histc: bins counters (100 by default)."""
    return _count(b.get("bins", 100))


def bincount(b):
    """bincount: max(minlength, the largest value + 1) counters. The largest value is a read of the
    data, made at call time (a program can compute ``2**30`` from its input: one element in, 2^30
    out); at load, on meta tensors, only minlength is known."""
    n = _count(b.get("minlength", 0))
    x = b.get("self")
    if n is None or not hasattr(x, "device") or x.device.type == "meta" or x.numel() == 0:
        return n
    return max(n, int(x.max()) + 1)


def fft(b):
    """fft_* with n (one dimension) or s (several): the input with those dimensions resized (rfft
    halves one, the complex output doubles the bytes: counted as 2 elements each)."""
    x = _shape(b.get("self"))
    if x is None:
        return None
    if b.get("n") is not None:
        n = _count(b["n"])
        if n is None:
            return None
        if b["n"] <= 0:   # what the kernel refuses (round 21)
            raise ValueError(f"n {b['n']} must be positive (the number of data points)")
        dim = b.get("dim", -1)
        dim = dim if isinstance(dim, int) and x and -len(x) <= dim < len(x) else -1
        rest = math.prod(x) // max(x[dim], 1) if x else 1
        return 2 * rest * n
    if b.get("s") is not None:
        s = _ints(b["s"])
        if s is None:
            return None
        if any(v <= 0 and v != -1 for v in s):   # -1: that dimension's own size
            raise ValueError(f"s {s} must hold positive sizes (or -1)")
        rest = math.prod(x[:max(len(x) - len(s), 0)])
        return 2 * rest * math.prod(max(abs(v), 1) for v in s)
    return 2 * math.prod(x)


def stft(b):
    """stft: n_fft // 2 + 1 frequencies x one frame per hop_length samples (a hop of 1 makes a frame
    per sample: n_fft times the input), complex (2 elements each)."""
    x, n_fft = _shape(b.get("self")), _count(b.get("n_fft"))
    if x is None or n_fft is None:
        return None
    hop = b.get("hop_length")
    hop = n_fft // 4 if hop is None else hop
    if _ints(hop) is None:
        return None
    length = (x[-1] if x else 1) + (n_fft if b.get("center", True) else 0)
    frames = max(length - n_fft, 0) // max(abs(hop), 1) + 1
    return 2 * math.prod(x[:-1]) * (n_fft // 2 + 1) * frames


def istft(b):
    """istft: the signal (length, or the frames overlapped by hop_length) for each batch entry."""
    x, n_fft = _shape(b.get("self")), _count(b.get("n_fft"))
    if x is None or n_fft is None or len(x) < 2:
        return None
    length = b.get("length")
    if length is None:
        hop = b.get("hop_length")
        hop = n_fft // 4 if hop is None else hop
        if _ints(hop) is None:
            return None
        length = n_fft + abs(hop) * (x[-1] - 1)
    if _ints(length) is None:
        return None
    return math.prod(x[:-2]) * max(abs(length), 1) + n_fft


def unfold(b):
    """Tensor.unfold(dimension, size, step): a view of overlapping windows (a step of 1 and a size of
    half the dimension view it len^2 / 4 times; the next op that copies it allocates that much)."""
    x, dim, size, step = _shape(b.get("self")), b.get("dimension"), b.get("size"), b.get("step")
    if x is None or _ints([dim, size, step]) is None:
        return None
    check_window(x, dim, size, step)   # what the kernel refuses: ValueError (op_sizes_constants.py)
    if not x:
        return max(abs(size), 1)
    n = x[dim] if -len(x) <= dim < len(x) else 1
    windows = max(n - size, 0) // max(abs(step), 1) + 1
    return math.prod(x) // max(n, 1) * windows * max(abs(size), 1)


def diagonal_matrix(b):
    """diag of a 1-D input, diagflat, diag_embed: n values on the diagonal of an n x n matrix (plus
    the offset), for each leading entry of diag_embed."""
    x = _shape(b.get("self"))
    offset = b.get("diagonal", b.get("offset", 0))
    if x is None or _ints(offset) is None:
        return None
    if "dim1" in b:   # diag_embed: the last dimension becomes a square
        n = (x[-1] if x else 1) + abs(offset)
        return math.prod(x[:-1]) * n * n
    if "diagonal" in b and len(x) == 2:   # diag of a matrix: its diagonal
        return min(x)
    n = math.prod(x) + abs(offset)
    return n * n


def _index_numel(idx) -> int | None:
    s = _shape(idx)
    return None if s is None else math.prod(s)


def embedding(b):
    """One row of the weight per index: the indices' elements times the row size."""
    w, n = _shape(b.get("weight")), _index_numel(b.get("indices"))
    if w is None or n is None:
        return None
    return n * (w[-1] if len(w) == 2 else 1)


def index_select(b):
    """One slice of self per index along dim."""
    x, n, dim = _shape(b.get("self")), _index_numel(b.get("index")), b.get("dim")
    if x is None or n is None or not isinstance(dim, int):
        return None
    if not x:
        return n
    along = x[dim] if -len(x) <= dim < len(x) else 1
    return math.prod(x) // max(along, 1) * n


def index(b):
    """Advanced indexing, self[i0, i1, ...]: the index tensors' broadcast shape (a bool mask: as many
    as its elements, over the dimensions it covers) times the dimensions no index names."""
    x, idx = _shape(b.get("self")), b.get("indices")
    if x is None or not isinstance(idx, (list, tuple)):
        return None
    shapes, used, free = [], 0, []
    for i in idx:
        if i is None:
            free.append(used)
            used += 1
            continue
        s = _shape(i)
        if s is None:
            return None
        if getattr(i, "dtype", None) in (torch.bool, torch.uint8):   # a mask covers len(s) dimensions
            shapes.append((math.prod(s),))
            used += max(len(s), 1)
        else:
            shapes.append(s)
            used += 1
    rank = max((len(s) for s in shapes), default=0)
    out = [max((s[k - rank + len(s)] for s in shapes if k - rank + len(s) >= 0), default=1) for k in range(rank)]
    rest = math.prod(x[used:]) * math.prod(x[k] for k in free if k < len(x))
    return math.prod(out) * rest


def _factors(b, full: bool):
    """Full (complete) factors of an m x n matrix are m x m and n x n; reduced ones m x k and k x n
    (k = min(m, n))."""
    x = _shape(b.get("A", b.get("self")))
    if x is None or len(x) < 2:
        return None
    m, n = x[-2], x[-1]
    k = min(m, n)
    per = m * m + n * n + k if full else m * k + k * n + k
    return math.prod(x[:-2]) * max(per, m * n)


def svd_factors(b):
    """linalg_svd (full_matrices, default True) / svd (some, default True: reduced)."""
    full = b.get("full_matrices", True) if "A" in b else b.get("some", True) is False
    return _factors(b, bool(full))


def qr_factors(b):
    """linalg_qr (mode 'reduced' by default, 'complete', 'r') / qr (some, default True: reduced)."""
    full = b.get("mode") == "complete" if "A" in b else b.get("some", True) is False
    return _factors(b, full)


def attention(b):
    """scaled_dot_product_attention: the math kernel makes an L x S score matrix per head."""
    q, k, v = (_shape(b.get(n)) for n in ("query", "key", "value"))
    if q is None or k is None or v is None or len(q) < 2 or len(k) < 2:
        return None
    heads = math.prod(q[:-2]) if len(q) > 2 else 1
    return heads * q[-2] * k[-2] + heads * q[-2] * v[-1]


def attention_flops(b):
    q, k, v = (_shape(b.get(n)) for n in ("query", "key", "value"))
    if q is None or k is None or v is None or len(q) < 2 or len(k) < 2:
        return None
    heads = math.prod(q[:-2]) if len(q) > 2 else 1
    return heads * q[-2] * k[-2] * (q[-1] + v[-1])


def grid_sampler(b):
    """Every channel of the input sampled at every grid point."""
    x, g = _shape(b.get("input")), _shape(b.get("grid"))
    if x is None or g is None or len(x) < 2 or len(g) < 2:
        return None
    return x[0] * x[1] * math.prod(g[1:-1])


def _pool_out(b, dims: int):
    x = _shape(b.get("self"))
    k = _ints(b.get("kernel_size"))
    if x is None or k is None or len(x) < dims:
        return None, None
    k = k * dims if len(k) == 1 else k
    stride = _ints(b.get("stride")) or k
    stride = stride * dims if len(stride) == 1 else stride
    pad = _ints(b.get("padding", 0)) or [0]
    pad = pad * dims if len(pad) == 1 else pad
    dil = _ints(b.get("dilation", 1)) or [1]
    dil = dil * dims if len(dil) == 1 else dil
    if not all(len(v) == dims for v in (k, stride, pad, dil)):
        return None, None
    check_pool(x, dims, k, stride, pad, dil, b.get("ceil_mode") is not False)   # constants the kernel refuses: ValueError (op_sizes_constants.py)
    spatial = x[-dims:]
    out = [max((n + 2 * abs(p) - d * (kk - 1) - 1) // max(abs(s), 1) + 1, 1)
           for n, kk, s, p, d in zip(spatial, k, stride, pad, dil)]
    return math.prod(x[:-dims]) * math.prod(out), math.prod(max(abs(kk), 1) for kk in k)


def pool(b, dims: int):
    """avg / max pooling: the output (and, for max pools, its indices): at most the input's elements."""
    n, _ = _pool_out(b, dims)
    return None if n is None else 2 * n


def pool_flops(b, dims: int):
    """Each output element reads its window: a window as long as the input with stride 1 reads the
    input's square."""
    n, window = _pool_out(b, dims)
    return None if n is None else n * window
