"""Hostile files of issue 21 that grow memory from small inputs at call time: broadcasts and the
products (each operand holds one element, the result n x n), and chains of 64 ops that each double
a tensor (cat, repeat, expand then copy, a broadcast add, diff with prepend), and a bincount of one
value n^2. Each is a real save of a small traced
program with its document edited and the CRC recomputed (tests/filesurgery.py).

A case is ``(name, file bytes, input spec)``; calling the loaded program on the input must raise
BudgetError before the op allocates (test_growth_files.py runs them in a child process whose
address space is capped far below what the op would take).

``direct_call_cases`` add a submodule method called directly (``loaded.sub.forward(y)``): it must hold
its own call to the budget of its own inputs, not to the budget a bigger root call left in the thread
(test_submodule_calls.py).
"""
from __future__ import annotations

import copy
import io
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import tracejit
from security_testlib import graphs, rewrite

INPUT = "1:8"          # the call's input: 8 floats
N_FACTOR = 2 ** 21     # the file's n = x.size(0) * 2 becomes 8 * 2^21 = 2^24: n^2 = 2^48 elements


def _col(x, n):
    """[n, 1] holding one element (an expanded view): the operand is small whatever n is."""
    return x[:1].expand(n).view(n, 1)


def _row(x, n):
    return x[:1].expand(n).view(1, n)


def _n(x):
    return x.size(0) * 2


# name -> program of x [8] whose output has n^2 elements, n = 2 * len(x)
BROADCASTS = {
    "add": lambda x: _col(x, _n(x)) + _row(x, _n(x)),
    "mul": lambda x: _col(x, _n(x)) * _row(x, _n(x)),
    "sub": lambda x: torch.sub(_col(x, _n(x)), _row(x, _n(x))),
    "where": lambda x: torch.where(_col(x, _n(x)) > 0, _col(x, _n(x)), _row(x, _n(x))),
    "addcmul": lambda x: torch.addcmul(_col(x, _n(x)), _col(x, _n(x)), _row(x, _n(x))),
    "lerp": lambda x: torch.lerp(_col(x, _n(x)), _row(x, _n(x)), 0.5),
    "masked_fill": lambda x: _col(x, _n(x)).masked_fill(_row(x, _n(x)) > 0, 1.0),
    "maximum": lambda x: torch.maximum(_col(x, _n(x)), _row(x, _n(x))),
    "hypot": lambda x: torch.hypot(_col(x, _n(x)), _row(x, _n(x))),
    "mse_loss": lambda x: F.mse_loss(_col(x, _n(x)), _row(x, _n(x)), reduction="none"),
    "cosine_similarity": lambda x: F.cosine_similarity(_col(x, _n(x))[..., None], _row(x, _n(x))[..., None], dim=-1),
    "pairwise_distance": lambda x: F.pairwise_distance(_col(x, _n(x))[..., None], _row(x, _n(x))[..., None]),
    "dist": lambda x: torch.dist(_col(x, _n(x)), _row(x, _n(x))),
    "cdist": lambda x: torch.cdist(_col(x, _n(x))[None], _col(x, _n(x))[None]),
    "outer": lambda x: torch.outer(x[:1].expand(_n(x)), x[:1].expand(_n(x))),
    "ger": lambda x: torch.ger(x[:1].expand(_n(x)), x[:1].expand(_n(x))),
    "kron": lambda x: torch.kron(_col(x, _n(x)), _row(x, _n(x))),
    "tensordot": lambda x: torch.tensordot(x[:1].expand(_n(x)), x[:1].expand(_n(x)), dims=0),
    "matmul_batch": lambda x: torch.matmul(_col(x, _n(x))[..., None, None], _row(x, _n(x)).t()[None, ..., None]),
    "bmm": lambda x: torch.bmm(_col(x, _n(x))[None], _row(x, _n(x))[None]),
    "bincount": lambda x: torch.bincount((x[:1] * 0 + _n(x) * _n(x)).long()),   # one counter per value up to n^2
}

# name -> one step of a chain: x [k] -> [2k]
DOUBLINGS = {
    "cat": lambda x: torch.cat([x, x]),
    "repeat": lambda x: x.repeat(2),
    "expand_copy": lambda x: x.expand(2, -1).reshape(-1),
    "broadcast_add": lambda x: (x[:2, None] + x[None, :]).flatten(),
    "diff_prepend": lambda x: torch.diff(x, prepend=x, append=x[:1]),   # two tensors of one shape, doubled
}
STEPS = 64


def _save(fn) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(fn, (torch.randn(8),))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return buf.getvalue()


def _grow_n(doc):
    """Every ``len(x) * 2`` of the program becomes ``len(x) * 2^21``."""
    for g in graphs(doc):
        for node in g["nodes"]:
            if node["op"] == "aten::mul.int":
                node["args"][1] = N_FACTOR


def _chain(doc, steps: int):
    """The graph's nodes (one step, input value 0 to the last node's output) repeated ``steps`` times,
    each step reading the one before; its declared shapes doubled like the real ones."""
    g = graphs(doc)[0]
    step = g["nodes"]
    k = len(step)

    def remap(a, s):
        if isinstance(a, dict) and set(a) == {"v"}:
            return {"v": a["v"] + s * k}
        return [remap(x, s) for x in a] if isinstance(a, list) else a

    nodes = []
    for s in range(steps):
        for node in step:
            node = copy.deepcopy(node)
            node["args"], node["kwargs"] = remap(node["args"], s), remap(node["kwargs"], s)
            for out in node["outputs"]:
                if out.get("shape"):
                    out["shape"][-1] = out["shape"][-1] << min(s, 40)
            nodes.append(node)
    g["nodes"] = nodes
    g["outputs"] = [{"v": steps * k}]


def growth_cases() -> list:
    cases = [(f"broadcast_{name}", rewrite(_save(fn), edit_doc=_grow_n), INPUT) for name, fn in BROADCASTS.items()]
    cases += [(f"chain_{STEPS}_{name}", rewrite(_save(fn), edit_doc=lambda d: _chain(d, STEPS)), INPUT)
              for name, fn in DOUBLINGS.items()]
    return cases


# ------------------------------------------------------------------------- submodule methods called directly
SUB_FACTOR = 16   # the submodule allocates len(y) x 16 bools; a hostile file raises the 16


class Sizer(nn.Module):
    """Allocates in proportion to its input: what a budget must hold when it is called directly."""

    def forward(self, y):
        return torch.ones([y.size(0) * SUB_FACTOR], dtype=torch.bool)


class Caller(nn.Module):
    """``forward`` does little (its inputs set the thread's last budget); ``slice_then_grow`` calls the
    submodule on 8 elements of its input, so the submodule's allocation rides on the outer call's budget."""

    def __init__(self):
        super().__init__()
        self.sub = Sizer()

    def forward(self, x):
        return x * 2

    def slice_then_grow(self, y):
        return self.sub(y[:8])


def caller_file(factor: int | None = None) -> bytes:
    """A real save of ``Caller`` (both methods traced); with ``factor`` the submodule's 16 is that."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace_module(Caller(), {"forward": (torch.randn(3),), "slice_then_grow": (torch.randn(8),)})
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    if factor is None:
        return buf.getvalue()

    def edit(doc):
        for g in graphs(doc):
            for node in g["nodes"]:
                if node["op"] == "aten::mul.int" and node["args"][1] == SUB_FACTOR:
                    node["args"][1] = factor
    return rewrite(buf.getvalue(), edit_doc=edit)


def direct_call_cases() -> list:
    """Jobs for sandbox_child.py: ``loaded.sub.forward`` on 8 elements asking for 2^29 bools (512 MB), after a
    root call on 2^23 elements whose budget (64 x 2^23 = 2^29) would have allowed it, and in a fresh process
    asking for 2^43."""
    return [{"name": "direct_submodule_after_big_root_call", "raw": caller_file(2 ** 26), "inputs": "1:8",
             "prime": f"2:{2 ** 23}", "method": "sub.forward"},
            {"name": "direct_submodule_fresh", "raw": caller_file(2 ** 40), "inputs": "1:8", "method": "sub.forward"}]
