"""Hostile files of the round-26 attack round (/work/wt/hostile26_findings.md has the whole table).

**The total work of a call, op by op** (each file a few KB, called on a 3 x 8 input): a factory of the file makes a
legal 2**25 - 1 element vector, and a chain of ``k`` element-by-element ops (``sin``), each making no more than
its input, runs on it: before this round nothing counted them (round 25 summed only the contractions), so k sines
cost k x ~0.1 s a call without end (300: half a minute; a 100,000-node file: hours). Now every op of a loaded
program whose ops could together pass a call's total counts its step weight (``ops.step_work``) times its
elements (support/call_budget.work_count): the call raises BudgetError after a bounded total.

``elementwise_chain(k, op)`` is the traced function (with an 8-element factory: the file edits it to
2**25 - 1, ``SIZED``); ``hostile_cases()`` / ``legit_cases()`` give round_problems' tuples.
"""
from __future__ import annotations

import torch

from security_testlib import graphs, output_sum, rewrite, traced_bytes

X = "1:3,8"
BIG = 2 ** 25 - 1   # a legal factory of a tiny file (limits.ALLOC_FLOOR = 2**25)


def elementwise_chain(k: int, op: str = "sin"):
    """``k`` calls of ``torch.<op>`` on an 8-element vector of the file's zeros plus the input's sum."""
    def fn(x):
        z = torch.zeros(8) + x.sum()
        for _ in range(k):
            z = getattr(torch, op)(z)
        return z.sum()
    return fn


def sized(raw: bytes, n: int = BIG) -> bytes:
    """The file with its first ``zeros`` factory asked for ``n`` elements."""
    def edit(doc):
        node = next(n for g in graphs(doc) for n in g["nodes"] if n["op"].startswith("aten::zeros."))
        node["args"][0] = [n]
    return rewrite(raw, edit_doc=edit)


CHAINS = {   # name -> (k, op): each a call-time BudgetError on a 3 x 8 input, after the call's total (10 to 20 s of
    # CPU here: the total is what a call may do; test_round26_files.py runs them with the ops made cheap)
    "sin_chain_400": (400, "sin"),
    "digamma_chain_40": (40, "digamma"),
    "sort_chain_200": (200, "msort"),
}


def hostile_cases() -> list:
    """``(name, file bytes, input spec, expect)`` in round_problems' form: the files refused within a CPU second
    (the chains are not: test_round26_files.py counts their ops instead)."""
    x = torch.randn(3, 8)
    norms = norm_files()
    return [("diff_order_2_22", diff_sized(traced_bytes(diffed, (x,))), X, "call_refused"),
            ("repeated_specializations", repeated_specializations(traced_bytes(elementwise_chain(700), (x,))), X,
             "reject"), *norm_cases(norms)]


def legit_cases() -> list:
    """Short chains, a diff, and the norm programs, called on other shapes: each answers as eager."""
    fn = elementwise_chain(20)
    out = [("legit_sin_chain_20", traced_bytes(fn, (torch.randn(3, 8),)), "2:5,4", output_sum(fn, "2:5,4")),
           ("legit_diff", traced_bytes(diffed, (torch.randn(3, 8),)), "2:5,4", output_sum(diffed, "2:5,4"))]
    for name, (f, shape, other) in NORM_OPS.items():
        spec = "2:" + ",".join(map(str, other))
        out.append((f"legit_{name}", traced_bytes(f, (torch.randn(*shape),)), spec, output_sum(f, spec)))
    return out


# ------------------------------------------------------------------------------------------ convolutions' work
def conv(x):
    """A convolution of the file's zeros (input [1, 8, 8], weight [8, 8, 1]): ``conv_sized`` makes both legal
    (each within the element budget, as is the output) and the work 5792^3 multiply-adds (4 s a call on one core)."""
    return torch.nn.functional.conv1d(torch.zeros(1, 8, 8) + x.sum(), torch.zeros(8, 8, 1)).sum()


def conv_sized(raw: bytes, n: int = 5792) -> bytes:
    """The conv file with its input [1, n, n] and its weight [n, n, 1]: every tensor under 2**25 elements."""
    def edit(doc):
        zeros = [n_ for g in graphs(doc) for n_ in g["nodes"] if n_["op"].startswith("aten::zeros.")]
        zeros[0]["args"], zeros[1]["args"] = [[1, n, n]], [[n, n, 1]]
    return rewrite(raw, edit_doc=edit)


# ------------------------------------------------------------------------------------------ norms' constants
NORM_OPS = {   # name -> (function, example shape, a legit other shape)
    "layer_norm": (lambda x: torch.nn.functional.layer_norm(x, [8], torch.ones(8), torch.zeros(8)), (3, 8), (5, 8)),
    "rms_norm": (lambda x: torch.nn.functional.rms_norm(x, [4, 8], torch.ones(4, 8)), (2, 4, 8), (3, 4, 8)),
    "group_norm": (lambda x: torch.nn.functional.group_norm(x, 2, torch.ones(6), torch.zeros(6)), (2, 6, 4),
                   (3, 6, 7)),
    "fold": (lambda x: torch.nn.functional.fold(x, (5, 5), (2, 2)), (1, 12, 16), (2, 12, 16)),
}


def _first(op: str, i, value):
    """Argument ``i`` of the first ``op`` node set to ``value``."""
    def edit(doc):
        node = next(n for g in graphs(doc) for n in g["nodes"] if n["op"].startswith(f"aten::{op}."))
        node["args"][i] = value
    return edit


NORM_EDITS = [   # (name, op, edit, what the LoadError says): each loaded and failed in the kernel at the first call
    ("layer_norm_shape_4", "layer_norm", _first("layer_norm", 1, [4]), r"normalized_shape \[4\] must be the input's "
                                                                       r"last sizes, but the input is \[3, 8\]"),
    ("rms_norm_shape_2_8", "rms_norm", _first("rms_norm", 1, [2, 8]), r"normalized_shape \[2, 8\] must be"),
    ("group_norm_groups_4", "group_norm", _first("group_norm", 1, 4),
     r"channels \(dim 1 of \[2, 6, 4\]\) must be divisible by num_groups 4"),
    ("group_norm_groups_3_weight_6", "group_norm", _first("group_norm", 1, 3), None),   # divides: loads, answers
    ("fold_output_5_6", "fold", _first("col2im", 1, [5, 6]), r"output_size \[5, 6\] .* makes 4 x 5 sliding blocks, "
                                                             r"but the input's last dimension holds 16"),
    ("fold_output_0", "fold", _first("col2im", 1, [0, 0]), r"makes -1 x -1 sliding blocks"),
]


def norm_files() -> dict:
    """The traced norm programs' files, by NORM_OPS name."""
    return {name: traced_bytes(fn, (torch.randn(*shape),)) for name, (fn, shape, _) in NORM_OPS.items()}


def norm_cases(files: dict) -> list:
    """``(name, file bytes, input spec, expect)`` of NORM_EDITS in round_problems' form (the one that divides is
    left out: it loads)."""
    return [(name, rewrite(files[op], edit_doc=edit), "1:" + ",".join(map(str, NORM_OPS[op][1])), "reject")
            for name, op, edit, what in NORM_EDITS if what is not None]


# ------------------------------------------------------------------------------------------ specializations table
def repeated_specializations(raw: bytes, n: int = 256, graph: int = 0) -> bytes:
    """The file with ``n`` specializations of its ``forward``, every one naming graph ``graph`` (the method's own):
    256 entries of a 700-node graph passed the checking bound (179,000 node visits) and took 14 s and 625 MB to load
    from a 260 KB file, each entry's graph decoded, checked and compiled again."""
    def edit(doc):
        doc["program"]["specializations"] = [{"method": "forward", "graph": graph, "reason": "r", "source": None}
                                             for _ in range(n)]
    return rewrite(raw, edit_doc=edit)


# ------------------------------------------------------------------------------------------ diff's order
def diffed(x):
    """``diff`` of order 2 of the file's 8-element vector (``diff_sized`` makes it 2**22 elements and order 2**22)."""
    return torch.diff(torch.zeros(8) + x.sum(), n=2).sum()


def diff_sized(raw: bytes, n: int = 2 ** 22) -> bytes:
    """The diff file with its vector of ``n`` elements and its order ``n``: n passes over a shrinking vector, n^2 / 2
    element steps (2**22: 2**43, about an hour), every size legal."""
    def edit(doc):
        nodes = [n_ for g in graphs(doc) for n_ in g["nodes"]]
        next(n_ for n_ in nodes if n_["op"].startswith("aten::zeros."))["args"] = [[n]]
        node = next(n_ for n_ in nodes if n_["op"].startswith("aten::diff."))
        node["kwargs"] = [[k, n if k == "n" else v] for k, v in node["kwargs"]]
    return rewrite(raw, edit_doc=edit)
