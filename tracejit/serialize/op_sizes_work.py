"""Work rules of ops whose kernels loop more than their output says (hostile-file round 25, docs/SECURITY.md).

Each op here makes no more elements than its input (its family's reason, or its element rule), but its work
grows with a value or a size the file controls, past the multiply-adds ``call_budget.WORK_FACTOR`` allows per
element. Measured on a 3-element input with one thread, before these rules:

- ``matrix_power(zeros(4096, 4096), 2**62)``: 124 products of 4096^3 (2 per bit of n), 3 minutes a call, where
  one product of that size is what the work budget allows;
- ``multilabel_margin_loss`` of a [1, 2**20] input and an all-zero target: the kernel compares every target
  (up to C per row) with every class (C), N x C^2 steps (C = 16,384 took 0.2 s; 2**20 about 14 minutes);
- ``lstm`` / ``gru`` / ``rnn_*`` (aten's fused recurrent ops): T x B steps, each a product of the step's input
  and hidden state with every weight matrix: a file's zeros as weights (T = 16,000, hidden 2,048) ran a
  minute a call; its element rule counted only the output.

``diff(x, n)`` (round 26): the kernel differences its input min(n, size along dim) times, each pass a new tensor
one shorter: a [2**25] vector and n = 2**25 is 2**48 element steps (hours), from one legal node.

Convolutions (round 26): each output position multiplies the weight's window with every input channel of its
group, output elements x kernel x in_channels / groups multiply-adds (a transposed one: each input element times
the weight's window and the output channels of its group), counted like a product's, in the per-op and per-call
work budgets.

Work is in multiply-adds (the unit of ``SizeRule.flops``), a scalar loop's step counted as ``SCALAR_STEP`` of
them: a compare-and-branch step with two loads costs about as much as 30 to 50 multiply-adds of a blocked
matrix product on one core (measured here: 1.3e9 steps/s against 4.9e10 multiply-adds/s, a 4096^3 product in
1.4 s). Like op_sizes.py: Python ints, None while a size is unknown (a traced int at load: checked at call time).
"""
from __future__ import annotations

import math

from .op_sizes import _ints, _shape, conv_geometry

SCALAR_STEP = 32   # multiply-adds one step of a kernel's scalar loop counts for


def matrix_power_flops(b):
    """matrix_power(self, n) by repeated squaring: two products of k x k per bit of |n| (a square, and a
    multiply where the bit is set), and an inverse (about k^3) for a negative n; 0 and 1 make no product."""
    x, n = _shape(b.get("self", b.get("A"))), b.get("n")
    if x is None or len(x) < 2 or _ints(n) is None:
        return None
    k, batch = x[-1], math.prod(x[:-2])
    products = 2 * max(abs(n).bit_length() - 1, 0) + (abs(n) > 1) + (n < 0)
    return batch * k ** 3 * products


def multilabel_margin_flops(b):
    """multilabel_margin_loss(self [N, C] or [C], target): per row, every target before the first -1 (up to
    C of them) against every class: N x C^2 scalar steps (the kernel reads the target's values only there)."""
    x = _shape(b.get("self"))
    if x is None or not x:
        return None
    c = x[-1]
    return math.prod(x[:-1]) * c * c * SCALAR_STEP


def rnn_flops(b):
    """lstm / gru / rnn_tanh / rnn_relu (the fused recurrent ops) on unpacked 3-D input [T, B, in] (or
    batch-first): each of the T x B steps multiplies its input and its hidden state by every weight matrix
    of every layer and direction: T x B x the weight matrices' elements (op_sizes.rnn checks their shapes)."""
    x, params = _shape(b.get("input")), b.get("params")
    if x is None or len(x) != 3 or not isinstance(params, (list, tuple)):
        return None
    weights = 0
    for p in params:
        s = _shape(p)
        if s is None:
            return None
        if len(s) == 2:
            weights += s[0] * s[1]
    return x[0] * x[1] * weights


def convolution_flops(b):
    """conv / conv_transpose (and convolution / _convolution): output elements x kernel x in_channels / groups
    (the weight's ``[C_out, C_in / groups, *kernel]``); a transposed one's: input elements x kernel x its weight's
    ``C_out / groups`` (``[C_in, C_out / groups, *kernel]``). The same count: one multiply-add per pair of an input
    and an output element the weight's window joins, padding's zeros included."""
    found = conv_geometry(b)
    if found is None:
        return None
    batch, cin, cout, spatial_in, out_sp, _, w = found
    window = math.prod(w[2:]) * w[1]
    if b.get("transposed", False):
        return batch * cin * math.prod(spatial_in) * window
    return batch * cout * math.prod(out_sp) * window


DISPATCH = 2 ** 16   # multiply-adds one op dispatch of a loop in Python-level ATen costs (about a microsecond)


def diff_flops(b):
    """diff(self, n, dim, prepend, append): min(n, the size along dim, prepend and append included) passes over
    at most all the elements, each pass a kernel step per element and a dispatch."""
    x, n, dim = _shape(b.get("self")), b.get("n", 1), b.get("dim", -1)
    if x is None or _ints(n) is None or _ints(dim) is None:
        return None
    extra = [_shape(b.get(k)) for k in ("prepend", "append") if b.get(k) is not None]
    if any(e is None for e in extra):
        return None
    total = math.prod(x) + sum(math.prod(e) for e in extra)
    length = (x[dim] if x and -len(x) <= dim < len(x) else 1) + sum(e[dim] if e and -len(e) <= dim < len(e) else 1
                                                                  for e in extra)
    passes = min(max(n, 0), length)
    return passes * (total * SCALAR_STEP + DISPATCH)
