"""The size rule derived for every op that takes two or more tensors and has no rule of its own.

The families of op_allowlist.py that need no rule say why an op's output is bounded by its inputs;
for an op of one tensor that is the input itself (the same elements or fewer). An op of several
tensors can still outgrow each of them: element-by-element ops broadcast (``a[n, 1] + b[1, m]``
makes n x m from n + m; likewise ``where``, ``addcmul``, ``lerp``, ``masked_fill``,
``cosine_similarity``, ``pairwise_distance``, ``dist``, losses, batched solves), and
concatenations add (``cat([x, x])`` doubles x; 64 of them in a row would make 2^64 x). So, default-
deny: such an op is counted as the larger of

- the broadcast of every tensor argument (right-aligned, each dimension the largest of the
  tensors' sizes there; a tensor list counts each of its tensors), and
- the sum of their elements (and at least one: a reduction of empty tensors is a 0-d tensor);

which bounds the output of every op of several tensors in those families (tests/security/
test_size_rules.py holds them to eager's output). Ops whose output is sized otherwise have their own
rule in size_rules.py (products, ``quantile``'s q times the input, ``nonzero``'s rank times it).

``constant_factor`` lets generated code skip the check cheaply when every tensor but one is the
file's own (a bias, a normalization weight): the output is then at most the varying tensor's
elements times a factor fixed at load (budget_plan._gate).
"""
from __future__ import annotations

import math


def _tensors(b: dict):
    """``(name, tensor)`` for every tensor among bound arguments (each of a list's, under its name)."""
    for k, v in b.items():
        for x in (v if isinstance(v, (list, tuple)) else (v,)):
            if hasattr(x, "shape") and hasattr(x, "numel"):
                yield k, x


def _broadcast_numel(shapes) -> int:
    rank = max((len(s) for s in shapes), default=0)
    n = 1
    for i in range(1, rank + 1):
        n *= max((s[-i] for s in shapes if len(s) >= i), default=1)
    return n


def broadcast_or_sum(b: dict) -> int:
    """The larger of the tensors' broadcast and the sum of their elements."""
    shapes, total = [], 0
    for _, t in _tensors(b):
        s = tuple(t.shape)
        shapes.append(s)
        total += math.prod(s)
    if len(shapes) == 2 and shapes[0] == shapes[1]:   # the common case: no broadcast, no concatenation of many
        return max(total, 1)
    return max(_broadcast_numel(shapes), total, 1)   # at least one: a dot of empty vectors is a 0-d zero


def constant_factor(b: dict, constants: set):
    """``(the varying argument, elements per element of it, 0)`` when every other tensor argument is
    one of the file's (``constants``): broadcast <= x * B and sum <= x + S <= x * (B + S), with B the
    constants' broadcast and S their elements. None otherwise (a list, or two varying tensors)."""
    varying = [(k, t) for k, t in _tensors(b) if k not in constants]
    if len(varying) != 1 or isinstance(b.get(varying[0][0]), (list, tuple)):
        return None
    fixed = [tuple(t.shape) for k, t in _tensors(b) if k in constants]
    return varying[0][0], _broadcast_numel(fixed) + sum(math.prod(s) for s in fixed), 0


def quantile(b: dict):
    """quantile / nanquantile: one result per q for each slice the reduction leaves."""
    x, q = b.get("self"), b.get("q")
    if not hasattr(x, "shape"):
        return None
    qs = math.prod(q.shape) if hasattr(q, "shape") else 1
    return max(qs, 1) * max(math.prod(x.shape), 1)


def nonzero(b: dict):
    """nonzero / argwhere: one row of rank coordinates per nonzero element (rank x the input at most:
    nonzero of a nonzero's output doubles it)."""
    x = b.get("self")
    if not hasattr(x, "shape"):
        return None
    return math.prod(x.shape) * max(len(x.shape), 1)
