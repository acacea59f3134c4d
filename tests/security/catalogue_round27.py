"""Hostile files of the round-27 attack round (/work/wt/hostile27_findings.md has the whole table).

**A call's work against its traced call's** (support/call_budget.Allowance): until this round a tiny file's call
could do the whole cap, 8 x 4096 x 2^25 multiply-adds (about 20 s on one core), on any input. Now a call may do
16 x its traced call's work (computed at load from the traced shapes), times the square of its inputs' growth, and
at most 16 x 256 x (the file's tensors' elements + n) x n for n input elements, at least 2^31 (about 0.05 s); a
file whose traced call alone needs more is refused at load.

- ``products(n, k)``: ``k`` products of an n x n matrix of the file's zeros (round 25's ``work_chain`` at n = 4096,
  k = 10: 14 s a call): its traced call claims k n^3 multiply-adds from a 3 x 8 input and no weights: a LoadError.
- ``round26.sized(elementwise_chain(400), 2**22)``: 400 sines of a factory edited to 2^22 elements behind a traced
  type of 8 (a file's types are claims): loads (its traced work is small), and its call stops at the floor, after
  no sine (before: about 128 sines, 5 s).
- ``attention(x)``: a real pattern whose work grows with the square of its length, called longer than traced.
"""
from __future__ import annotations

import torch


def products(n: int, k: int):
    """``k`` products of an n x n matrix of zeros plus the input's sum."""
    def fn(x):
        a = torch.zeros(n, n) + x.sum()
        for _ in range(k):
            a = a @ a
        return a.sum()
    return fn


def attention(x):
    """Self-attention without weights: [L, d] -> [L, d], L^2 d multiply-adds twice."""
    scores = torch.softmax(x @ x.transpose(-1, -2) / x.shape[-1] ** 0.5, dim=-1)
    return scores @ x
