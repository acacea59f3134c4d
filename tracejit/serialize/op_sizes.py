"""How many elements an op is about to allocate, from its arguments, before it runs.

One function per kind of op whose output (or working memory) can outgrow its inputs: factories
that take sizes, broadcasts and repeats, padding, convolution with its padding and dilation,
im2col, Vandermonde matrices, einsum's intermediates, Cartesian products and combinations,
one-hot encodings. Each takes the op's arguments bound to their schema names (``{"self": x,
"size": [...]}``) and returns an element count. The arguments are the real ones at call time
(support/call_budget.py) or, at load, meta tensors of the traced shapes (op_checks.py).

Counts use Python ints (no overflow); a size that is not an int yet (a traced one, at load)
makes the function return None: unknown now, checked at call time.
"""
from __future__ import annotations

import math


def _shape(t):
    return tuple(t.shape) if hasattr(t, "shape") else None


def _ints(xs):
    """A list of ints (one int stands for a one-element list), or None when one is unknown."""
    if isinstance(xs, int) and not isinstance(xs, bool):
        return [xs]
    if not isinstance(xs, (list, tuple)) or not all(isinstance(x, int) and not isinstance(x, bool) for x in xs):
        return None
    return list(xs)


def _numel(t) -> int:
    s = _shape(t)
    return 1 if s is None else math.prod(s)


def _prod_abs(xs) -> int:
    return math.prod(max(abs(x), 1) for x in xs)


def factory(b):
    """zeros / ones / empty / full / rand... / new_*: the ``size`` argument. With some sizes traced (at
    load), the product of the constant ones: a lower bound that already refuses ``zeros([n, 2**30])``."""
    size = b.get("size")
    sizes = _ints(size)
    if sizes is None and isinstance(size, (list, tuple)):
        known = [x for x in size if isinstance(x, int) and not isinstance(x, bool)]
        return _prod_abs(known) if known else None
    return None if sizes is None else _prod_abs(sizes)


def randperm(b):
    n = b.get("n")
    return None if _ints(n) is None else abs(n)


def eye(b):
    n, m = b.get("n"), b.get("m", b.get("n"))
    return None if _ints([n, m]) is None else _prod_abs([n, m])


def tri_indices(b):
    row, col = b.get("row"), b.get("col")
    return None if _ints([row, col]) is None else 2 * _prod_abs([row, col])


def arange(b):
    if "steps" in b:   # linspace / logspace
        return None if _ints(b["steps"]) is None else abs(b["steps"])
    start, end, step = b.get("start", 0), b.get("end"), b.get("step", 1)
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (start, end, step)):
        return None
    try:
        n = abs((end - start) / step) if step else math.inf
    except (ArithmeticError, TypeError):
        return math.inf
    return math.inf if not math.isfinite(n) else math.ceil(n)


def expand(b):
    """expand / broadcast_to: -1 keeps the input's size; new leading dims multiply."""
    sizes, shape = _ints(b.get("size")), _shape(b.get("self"))
    if sizes is None or shape is None:
        return None
    lead = len(sizes) - len(shape)
    out = [shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(sizes)]
    return _prod_abs(out)


def expand_as(b):
    return _numel(b.get("other"))


def like_self(b):
    """reshape_as / view_as / type_as: ``self``'s elements in ``other``'s shape or dtype (not the two tensors'
    broadcast, which counted a weight standardization ``w.reshape(1, C, -1) ... .reshape_as(w)`` as C^2 K^2)."""
    return _numel(b.get("self"))


def broadcast(b):
    """broadcast_tensors / meshgrid: every output has the broadcast (meshgrid: product) shape; a later op
    materializes them."""
    ts = b.get("tensors")
    if not isinstance(ts, (list, tuple)):
        return None
    shapes = [_shape(t) or () for t in ts]
    if "indexing" in b or b.get("_meshgrid"):
        return math.prod(math.prod(s) for s in shapes) * max(len(ts), 1)
    rank = max((len(s) for s in shapes), default=0)
    out = [max((s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0), default=1) for i in range(rank)]
    return math.prod(out) * max(len(ts), 1)


def meshgrid(b):
    return broadcast({**b, "_meshgrid": True})


def repeat(b):
    reps = _ints(b.get("repeats", b.get("dims")))
    if reps is None:
        r = b.get("repeats")
        if hasattr(r, "shape"):   # repeat_interleave by a tensor of counts: their sum (a read at call time)
            if r.device.type == "meta":
                return None
            return int(r.sum()) * max(_numel(b.get("self")), 1) if r.numel() else 0
        return None
    if "repeats" in b and any(r < 0 for r in reps):   # repeat_interleave (repeat's negatives: the schema check)
        raise ValueError(f"repeats {reps} must be non-negative")
    return _numel(b.get("self")) * _prod_abs(reps)


def pad(b):
    """constant_pad_nd / pad / reflection_pad / replication_pad: each side widens one dimension."""
    pads, shape = _ints(b.get("pad", b.get("padding"))), _shape(b.get("self"))
    if pads is None or shape is None:
        return None
    dims = list(shape)
    for i in range(min(len(pads) // 2, len(dims))):
        dims[-1 - i] = max(dims[-1 - i] + pads[2 * i] + pads[2 * i + 1], 0)
    return _prod_abs(dims)


def _per_dim(x, n):
    xs = _ints(x)
    if xs is None:
        return None
    return xs * n if len(xs) == 1 else xs


def conv_geometry(b):
    """``(batch, input channels, output channels, input spatial sizes, output spatial sizes, padding, weight
    shape)`` of a conv / conv_transpose's bound arguments, or None while a size is unknown."""
    x, w = _shape(b.get("input")), _shape(b.get("weight"))
    if x is None or w is None or len(w) < 3:
        return None
    nsp = len(w) - 2
    stride, dil = _per_dim(b.get("stride", 1), nsp), _per_dim(b.get("dilation", 1), nsp)
    padding = b.get("padding", 0)
    if isinstance(padding, str):
        padding = 0 if padding == "valid" else [(d * (k - 1)) // 2 + 1 for d, k in zip(dil or [1] * nsp, w[2:])]
    pad_ = _per_dim(padding, nsp)
    if None in (stride, dil, pad_):
        return None
    spatial_in = list(x[-nsp:])
    transposed = bool(b.get("transposed", False))
    out_sp = []
    for i in range(nsp):
        k = dil[i] * (w[2 + i] - 1) + 1
        if transposed:
            out_sp.append(max((spatial_in[i] - 1) * abs(stride[i]) + k, 0))
        else:
            out_sp.append(max((spatial_in[i] + 2 * pad_[i] - k) // max(abs(stride[i]), 1) + 1, 0))
    batch = math.prod(x[:-nsp - 1]) if len(x) > nsp + 1 else 1
    cin = x[-nsp - 1] if len(x) > nsp else 1
    cout = w[1] * int(b.get("groups", 1) or 1) if transposed else w[0]
    return batch, cin, cout, spatial_in, out_sp, pad_, w


def convolution(b):
    """conv / conv_transpose: the output and the padded input (CPU kernels pad or unfold it first)."""
    found = conv_geometry(b)
    if found is None:
        return None
    batch, cin, cout, spatial_in, out_sp, pad_, w = found
    padded = batch * cin * math.prod(s + 2 * abs(p) for s, p in zip(spatial_in, pad_))
    # the unfolded input of a CPU convolution: one column per output position, Cin * kernel rows
    unfolded = batch * cin * math.prod(w[2:]) * math.prod(out_sp)
    return max(batch * cout * math.prod(out_sp), padded, unfolded)


def im2col(b):
    x = _shape(b.get("self"))
    k, d, p, s = (_per_dim(b.get(n), 2) for n in ("kernel_size", "dilation", "padding", "stride"))
    if x is None or None in (k, d, p, s):
        return None
    blocks = 1
    for i in range(2):
        span = d[i] * (k[i] - 1) + 1
        blocks *= max((x[-2 + i] + 2 * p[i] - span) // max(abs(s[i]), 1) + 1, 0)
    lead = math.prod(x[:-2])
    return max(lead * _prod_abs(k) * blocks, lead * math.prod(x[-2 + i] + 2 * abs(p[i]) for i in range(2)))


def col2im(b):
    x, out = _shape(b.get("self")), _ints(b.get("output_size"))
    k = _per_dim(b.get("kernel_size"), 2)
    if x is None or out is None or k is None:
        return None
    channels = x[-2] // max(_prod_abs(k), 1)
    return math.prod(x[:-2]) * channels * _prod_abs(out)


def vander(b):
    x = b.get("x", b.get("self"))
    n = b.get("N")
    shape = _shape(x)
    if shape is None:
        return None
    if n is None:
        n = shape[-1] if shape else 1
    return None if _ints(n) is None else math.prod(shape) * max(abs(n), 1)


def outer(b):
    return _numel(b.get("self")) * _numel(b.get("vec2", b.get("other")))


def block_diag(b):
    ts = b.get("tensors")
    if not isinstance(ts, (list, tuple)):
        return None
    shapes = [_shape(t) or () for t in ts]
    rows = sum((s[0] if len(s) == 2 else 1) for s in shapes)
    cols = sum((s[-1] if len(s) >= 1 else 1) for s in shapes)
    return rows * cols


def cartesian_prod(b):
    ts = b.get("tensors")
    if not isinstance(ts, (list, tuple)):
        return None
    return math.prod(_numel(t) for t in ts) * max(len(ts), 1)


def combinations(b):
    """torch.combinations builds an n^r grid before it picks the combinations."""
    r = b.get("r", 2)
    if _ints(r) is None:
        return None
    n, r = _numel(b.get("self")), max(r, 0)
    if n > 1 and r > 64:   # past 2^64 elements whatever n is: never raise a file's int to a file's power
        return 2 ** 64 * r
    return n ** r * max(r, 1)


def check_classes(x, classes: int) -> None:
    """one_hot: ``num_classes`` is -1 (from the data) or at least 0; at a call (a tensor with data) every
    class value within [0, num_classes): a min and a max, cheaper than the one_hot they guard."""
    if classes < -1:
        raise ValueError(f"num_classes {classes} must be -1 or non-negative")
    if classes >= 0 and hasattr(x, "shape") and x.device.type != "meta" and x.numel() > 0:
        lo, hi = int(x.min()), int(x.max())
        if lo < 0 or hi >= classes:
            raise ValueError(f"class values {lo} to {hi} must lie in [0, num_classes={classes})")
    elif classes == 0 and hasattr(x, "shape") and x.numel() > 0:   # traced shapes: no class for any value
        raise ValueError("num_classes 0 leaves no class for the input's values")


def one_hot(b):
    classes = b.get("num_classes", -1)
    if _ints(classes) is None:
        return None
    x = b.get("self")
    check_classes(x, classes)   # -1 or >= 0; at a call, the values within them
    if classes < 0:   # as many classes as the largest index + 1: a read of the data
        if x is None or not hasattr(x, "shape") or x.device.type == "meta" or x.numel() == 0:
            return None
        classes = int(x.max()) + 1
    return _numel(x) * max(classes, 1)


def einsum(b):
    """The largest operand or intermediate of a left-to-right pairwise contraction."""
    r = _einsum(b)
    return None if r is None else r[0]


def einsum_flops(b):
    """The multiply-adds of a left-to-right pairwise contraction: each step loops over every letter
    of its two operands."""
    r = _einsum(b)
    return None if r is None else r[1]


def _einsum(b):
    eq, ts = b.get("equation"), b.get("tensors")
    if not isinstance(eq, str) or not isinstance(ts, (list, tuple)):
        return None
    lhs, arrow, rhs = eq.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ts):
        return None
    size: dict[str, int] = {}
    for term, t in zip(terms, ts):
        shape = _shape(t)
        if shape is None:
            return None
        letters = [c for c in term if c.isalpha()]
        ell = len(shape) - len(letters)
        dims = dict(zip(letters, shape[ell:] if "..." in term else shape))
        for c, n in dims.items():
            size[c] = max(size.get(c, 1), n)
        if "..." in term:
            size["..."] = max(size.get("...", 1), math.prod(shape[:ell]) if ell > 0 else 1)
    out = set(rhs.replace("...", "")) | ({"..."} if "..." in eq else set())
    if not arrow:   # implicit output: letters seen once, and the ellipsis
        counts = {c: lhs.count(c) for c in size if c != "..."}
        out = {c for c, k in counts.items() if k == 1} | ({"..."} if "..." in eq else set())
    biggest = work = 0
    acc: set = set()
    for i, term in enumerate(terms):
        acc |= set(term.replace("...", "")) | ({"..."} if "..." in term else set())
        if i or len(terms) == 1:   # a contraction loops over both operands' letters (one operand: its own)
            work += math.prod(size.get(c, 1) for c in acc)
        later = set("".join(terms[i + 1:]).replace("...", "")) | ({"..."} if "..." in "".join(terms[i + 1:]) else set())
        acc = {c for c in acc if c in out or c in later} if i else acc
        biggest = max(biggest, math.prod(size.get(c, 1) for c in acc))
    return max(biggest, math.prod(size.get(c, 1) for c in out)), work


def upsample(b):
    """upsample_*: the output size, or the input's spatial sizes times the scale factors."""
    x = _shape(b.get("self", b.get("input")))
    if x is None:
        return None
    out = b.get("output_size")
    if out is not None:
        out = _ints(out)
        return None if out is None else math.prod(x[:2]) * _prod_abs(out)
    scales = b.get("scale_factors", b.get("scale_factor"))
    if isinstance(scales, (int, float)):
        scales = [scales] * max(len(x) - 2, 1)
    if not isinstance(scales, (list, tuple)) or not all(isinstance(s, (int, float)) for s in scales):
        return None
    spatial = list(x[2:]) + [1] * max(len(scales) - len(x[2:]), 0)   # a rank the kernel refuses: still counted
    return math.prod(x[:2]) * math.prod(math.floor(n * abs(s)) if math.isfinite(s) else math.inf
                                        for n, s in zip(spatial, scales))


def kron(b):
    return _numel(b.get("self")) * _numel(b.get("other"))


GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def rnn(b, op: str = "lstm"):
    """lstm / gru / rnn_*: the kernels trust the weights' and hidden states' shapes (an LSTM hidden
    state of the wrong size corrupts the heap), so every shape is checked here, at load on the traced
    shapes and at call time on the real ones (ValueError: inconsistent); returns the output's elements."""
    x, hx, params = _shape(b.get("input")), b.get("hx"), b.get("params")
    layers, dirs = b.get("num_layers"), 2 if b.get("bidirectional") else 1
    biases = b.get("has_biases")
    if "batch_sizes" in b or x is None or len(x) != 3 or not isinstance(params, (list, tuple)) \
            or _ints(layers) is None or not 1 <= layers <= 64 or not isinstance(biases, bool):
        raise ValueError("only unpacked 3-D input with a constant layer count (1 to 64) is accepted")
    per = 4 if biases else 2
    if len(params) != layers * dirs * per:
        raise ValueError(f"{len(params)} weights for {layers} layer(s) x {dirs} direction(s) x {per}")
    shapes = [_shape(p) for p in params]
    hidden = shapes[1][-1] if shapes[1] and len(shapes[1]) == 2 else None
    gates = GATES[op] * (hidden or 0)
    batch, width = (x[0], x[2]) if b.get("batch_first") else (x[1], x[2])
    for layer in range(layers):
        for d in range(dirs):
            w_ih, w_hh, *bias = shapes[(layer * dirs + d) * per:(layer * dirs + d + 1) * per]
            want_in = width if layer == 0 else hidden * dirs
            if w_ih != (gates, want_in) or w_hh != (gates, hidden) or any(s != (gates,) for s in bias):
                raise ValueError(f"layer {layer} has weights {w_ih}, {w_hh}, {bias}; expected ({gates}, {want_in}), "
                                 f"({gates}, {hidden}) and biases ({gates},)")
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    if len(states) != (2 if op == "lstm" else 1):
        raise ValueError(f"{len(states)} hidden state tensors")
    for h in states:
        if _shape(h) != (layers * dirs, batch, hidden):
            raise ValueError(f"a hidden state of shape {list(_shape(h) or ())}, expected "
                             f"{[layers * dirs, batch, hidden]}")
    return x[0] * x[1] * hidden * dirs
