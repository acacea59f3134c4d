"""Chained linear layers in a numpy kernel carry a column of ones, so a bias rides in the product.

In ``linear -> relu -> linear`` the first product gets one more column that its bias sets to 1
(relu keeps a 1); the next layer's weight gets its bias as one more row, so ``h.dot(W')`` is
``h.dot(W.T) + b`` in one BLAS call instead of a product and an ``add`` (a ufunc call costs
about as much as the small product). The numbers differ from torch's only by where the bias
enters the float32 sum (same as torch's own addmm, which also adds it in the GEMM).

Only internal values (one use, not a kernel output) carry the column, and only through relu
(``relu(1) == 1``) or directly from one linear to the next.
"""
from __future__ import annotations

import numpy as np


def fold_biases(steps: list, outputs: list, constants: list) -> dict:
    """``{step index: (numpy template, {global name: array})}`` for the steps that change."""
    uses: dict[int, int] = {}
    for _, operands, _ in steps:
        for kind, what in operands:
            if kind == "v":
                uses[what] = uses.get(what, 0) + 1
    private = {j for j in range(len(steps)) if uses.get(j) == 1 and j not in outputs}
    carries: dict[int, int] = {}   # step whose result carries the ones column -> the linear that made it
    ins: dict[int, int] = {}       # linear step -> the linear whose ones column it reads
    for j, (op, operands, _) in enumerate(steps):
        if op != "linear":
            continue
        src = operands[0]
        if src[0] != "v" or src[1] not in private:
            continue
        p = src[1]
        if steps[p][0] == "relu" and steps[p][1][0][0] == "v" and steps[p][1][0][1] in private:
            q = steps[p][1][0][1]
        else:
            q = p
        if steps[q][0] == "linear" and (q == p or steps[p][0] == "relu"):
            ins[j] = q
            carries[q] = q
    variants = {}
    for j, (op, operands, _) in enumerate(steps):
        if j not in ins and j not in carries:
            continue
        w = _array(constants, operands[1]).T            # (in, out)
        b = _array(constants, operands[2])
        aug_in, aug_out = j in ins, j in carries
        rows = w.shape[0] + (1 if aug_in else 0)
        cols = w.shape[1] + (1 if aug_out else 0)
        m = np.zeros((rows, cols), dtype=np.float32)
        m[:w.shape[0], :w.shape[1]] = w
        if aug_in:
            m[-1, :w.shape[1]] = b
            if aug_out:
                m[-1, -1] = 1.0
            variants[j] = ("{o} = {a}.dot(_B%d)" % j, {f"_B{j}": m})
        else:                                           # first of a chain: the bias add sets the ones
            bias = np.concatenate([b, np.ones(1, dtype=np.float32)])
            # a 2-D product gets a (1, n) bias: numpy adds arrays of equal rank in half the time
            variants[j] = ("{o} = {a}.dot(_B%d); _np.add({o}, _Bb%dR if {o}.ndim == 2 else _Bb%d, {o})" % (j, j, j),
                           {f"_B{j}": m, f"_Bb{j}": bias, f"_Bb{j}R": bias.reshape(1, -1)})
    return variants


def _array(constants: list, operand) -> np.ndarray:
    kind, index = operand
    assert kind == "k", operand
    return constants[index].detach().numpy()
