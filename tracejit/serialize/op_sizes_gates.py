"""Static factors of convolutions and pooling: what the op makes per element of its varying input when its
kernel (a weight of the file) and its stride, padding, dilation and kernel sizes are constants of the file.

``SizeRule.static_factor`` (size_rules.py) lets generated code skip an op's full size check while its input is
small: ``if not 0 < x.numel() <= N: check(...)`` (serialize/budget_plan._gate), N the most elements whose op
stays within the file's own budget. The factor must bound the op's rule (op_sizes.convolution, op_sizes_args.pool)
for *every* non-empty input (an empty one takes the full check). Each spatial output size is at most
``s + 2|p| + 1 <= s (2|p| + 2)`` for a non-empty input extent ``s >= 1`` (stride and kernel only shrink it),
so with ``P = prod(2|p_i| + 2)``:

- convolution (not transposed) of x [..., Cin, s_1..s_d] by W [Cout, Cin/groups, k_1..k_d], kernel checks
  Cin = W.shape[1] x groups before it allocates: the output ``n / Cin x Cout x P``, the padded input
  ``n x P``, the unfolded input ``n x prod(k) x P``;
- pooling: output and indices ``2 x n x P``, work ``n x P x prod(k)``.

Anything not constant (a traced stride, a weight computed in the program, a transposed convolution, a padding
string other than "valid"): None, the check runs at every call as before.
"""
from __future__ import annotations

import math

from .op_sizes import _ints, _per_dim, _shape


def _constant_ints(b: dict, names: tuple, n: int):
    out = []
    for name in names:
        v = _per_dim(b.get(name), n)
        if v is None or len(v) != n:
            return None
        out.append(v)
    return out


def convolution_factor(b: dict, constants: set):
    """``("input", elements per input element, multiply-adds per input element)`` for a convolution by a weight of
    the file, else None: each input element meets each output channel of its group at most once per kernel
    position (op_sizes_work.convolution_flops), padding's zeros spread like the elements."""
    if "weight" not in constants or "input" in constants or b.get("transposed"):
        return None
    w = _shape(b.get("weight"))
    groups = b.get("groups", 1)
    if w is None or len(w) < 3 or not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        return None
    nsp = len(w) - 2
    padding = b.get("padding", 0)
    if padding == "valid":
        padding = 0
    found = _constant_ints({**b, "padding": padding}, ("stride", "padding", "dilation"), nsp) \
        if not isinstance(padding, str) else None
    cin = w[1] * groups
    if found is None or cin < 1:
        return None
    spread = math.prod(2 * abs(p) + 2 for p in found[1])
    return "input", max(w[0] / cin, 1, math.prod(w[2:])) * spread, w[0] / groups * math.prod(w[2:]) * spread


def pool_factor(b: dict, constants: set, dims: int):
    """``("self", elements, multiply-adds per input element)`` for a pooling of constant sizes, else None."""
    k = _per_dim(b.get("kernel_size"), dims)
    stride = b.get("stride")
    found = _constant_ints({"padding": b.get("padding", 0), "dilation": b.get("dilation", 1)},
                           ("padding", "dilation"), dims)
    if k is None or len(k) != dims or found is None or not (stride in ([], ()) or stride is None
                                                           or _per_dim(stride, dims) is not None):
        return None
    spread = 2 * math.prod(2 * abs(p) + 2 for p in found[0])
    return "self", spread, spread * math.prod(max(abs(x), 1) for x in k)
