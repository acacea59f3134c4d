"""Hostile files of the round-25 attack round (/work/wt/hostile25_findings.md has the whole table).

**Call-time work** (each file a few KB, called on a 3 x 8 input): ops whose kernels loop more than their output
says, on tensors the file makes with its own factories (within the element budget), so every size stays legal
and only the *work* is hostile. Before this round each loaded and ran its call for minutes (the sandbox child's
CPU limit killed it); now the call raises BudgetError before the kernel runs (serialize/op_sizes_work.py):

- ``matrix_power_2_62`` / ``linalg_matrix_power_2_62``: the power 2**62 of a 4096 x 4096 matrix: 124 products
  of 4096^3 (3 minutes a call);
- ``multilabel_margin_2_20``: multilabel_margin_loss of [1, 2**20] with an all-zero target: 2^40 scalar steps
  (about 14 minutes);
- ``lstm_16000_steps`` / ``gru_16000_steps``: a fused recurrent op over 16,000 steps with the file's zeros as
  2,048-wide weights (a minute).

**A call guard's broadcast**: ``allclose_guard_2_32``: a call guard repeating ``torch.allclose`` of two of the file's
tensors, [2**16, 1] and [1, 2**16] (legal), asked for 2**32 elements (4.4 GB resident, then a failed 17 GB
allocation); now sized like an op of two tensors before the guard runs (serialize/guards.BROADCASTING_CALLS,
budget_plan._guard_check): BudgetError. ``repr_guard_2_25`` / ``_2_20``: a call guard repeating ``repr`` of a view
expanded to [2] * 25 (legal): torch prints every element of a tensor whose dimensions are all short (800 MB, minutes;
[2] * 20: 11 s); now a GuardError before printing, the printed elements being more than the text compared with
has characters (serialize/guards.TEXT_READS).

**Constants the kernels of sized ops refuse** (``CONSTANT_EDITS``, on a [1, 2, 6, 6] input): an upsampling size of
0 or -3, a negative adaptive pooling size, cdist's compute_mode 7 or p -1, stft's hop 0 or a window of 20 for an
n_fft of 8, im2col's padding -5, histc's min above its max, quantile's q 1.5, a circular padding of 7 on a size-6
dimension: each loaded and raised the kernel's RuntimeError at the first call; now a LoadError naming the node,
the argument and what the kernel would refuse (serialize/op_sizes_refused.py).

``hostile_cases()`` / ``legit_cases()`` give round_problems' tuples; the legitimate files are the unedited programs
called on another shape, answering as eager.
"""
from __future__ import annotations

import warnings

import torch

import tracejit
from security_testlib import graphs, rewrite, to_bytes

X = "1:3,8"


def _factories(doc, op: str):
    return [n for g in graphs(doc) for n in g["nodes"] if n["op"].startswith(f"aten::{op}.")]


def _sizes(op: str, *shapes):
    """The program's ``op`` factories (zeros, eye), in order, asked for ``shapes`` instead."""
    def edit(doc):
        for n, shape in zip(_factories(doc, op), shapes):
            n["args"][:len(shape)] = list(shape)
    return edit


def _arg(op: str, i: int, value):
    return lambda doc: _factories(doc, op)[0]["args"].__setitem__(i, value)


def _then(*edits):
    def edit(doc):
        for e in edits:
            e(doc)
    return edit


def _matrix_power(x):
    return torch.matrix_power(torch.eye(4) + x.sum(), 3).sum(0)


def _linalg_matrix_power(x):
    return torch.linalg.matrix_power(torch.eye(4) + x.sum(), 3).sum(0)


def _multilabel(x):
    a = torch.zeros(1, 8) + x.sum()
    return torch.nn.functional.multilabel_margin_loss(a, torch.zeros(1, 8, dtype=torch.long), reduction="none")


def _recurrent(op):
    """``op`` (torch.lstm / gru / rnn_tanh) over a sequence and weights the program makes: 8 steps, hidden 3."""
    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1}[op]

    def fn(x):
        s = x.sum()
        seq, h = torch.zeros(8, 1, 2) + s, torch.zeros(1, 1, 3)
        weights = [torch.zeros(3 * gates, 2) + s / 100, torch.zeros(3 * gates, 3) + s / 100]
        states = (h, h) if op == "lstm" else h
        return getattr(torch, op)(seq, states, weights, False, 1, 0.0, False, False, False)[0][-1]
    return fn


def allclose_guard_broadcast(x):
    """A call guard repeating ``torch.allclose`` of two tensors the program makes ([4, 1] and [1, 4]: they
    broadcast)."""
    a = torch.zeros(4, 1) + x.sum()
    b = torch.zeros(1, 4) + x.sum()
    return x + 1 if torch.allclose(a, b) else x - 1


def repr_guard(x):
    """A call guard repeating ``repr`` of a [2, 2] view of one element (its text: 36 characters)."""
    a = torch.zeros(1).expand(2, 2)
    return x + 1 if "tensor" in repr(a) else x - 1


def _expand_to(shape):
    def edit(doc):
        n = next(n for g in graphs(doc) for n in g["nodes"] if n["op"].startswith("aten::expand."))
        n["args"] = [n["args"][0], *shape]
    return edit


OPS = {   # name -> (function of x [3, 8], a legit second shape)
    "matrix_power": (_matrix_power, "2:4,6"),
    "linalg_matrix_power": (_linalg_matrix_power, "2:4,6"),
    "multilabel": (_multilabel, "2:4,6"),
    "lstm": (_recurrent("lstm"), "2:4,6"),
    "gru": (_recurrent("gru"), "2:4,6"),
    "allclose_guard": (allclose_guard_broadcast, "2:4,6"),
    "repr_guard": (repr_guard, "2:4,6"),
}

EDITS = [   # (name, op, edit, expect)
    ("matrix_power_2_62", "matrix_power",
     _then(_sizes("eye", (4096,)), _arg("matrix_power", 1, 2 ** 62)), "call_refused"),
    ("linalg_matrix_power_2_62", "linalg_matrix_power",
     _then(_sizes("eye", (4096,)), _arg("linalg_matrix_power", 1, 2 ** 62)), "call_refused"),
    ("multilabel_margin_2_20", "multilabel", _sizes("zeros", (1, 2 ** 20), (1, 2 ** 20)), "call_refused"),
    ("lstm_16000_steps", "lstm",
     _sizes("zeros", (16000, 1, 1), (1, 1, 2048), (8192, 1), (8192, 2048)), "call_refused"),
    ("gru_16000_steps", "gru",
     _sizes("zeros", (16000, 1, 1), (1, 1, 2048), (6144, 1), (6144, 2048)), "call_refused"),
    # a call guard's broadcast: [2**16, 1] and [1, 2**16] (legal) made the guard's allclose ask for 2**32 elements
    ("allclose_guard_2_32", "allclose_guard", _sizes("zeros", (2 ** 16, 1), (1, 2 ** 16)), "call_refused"),
    # a printed tensor: the view expanded to [2] * 25 (2**25 elements, legal) printed every one (torch elides only
    # dimensions longer than 2 x edgeitems): 800 MB of text, minutes a call; [2] * 20 took 11 s
    ("repr_guard_2_25", "repr_guard", _expand_to([2] * 25), "call_refused"),
    ("repr_guard_2_20", "repr_guard", _expand_to([2] * 20), "call_refused"),
]


# ------------------------------------------------------------------------------------------ refused constants
X4 = "1:1,2,6,6"
F = torch.nn.functional


def _node_arg(op: str, i: int, value):
    """Argument ``i`` of the first ``op`` node set to ``value`` (a keyword when ``i`` is a name)."""
    def edit(doc):
        n = next(n for g in graphs(doc) for n in g["nodes"] if n["op"].startswith(f"aten::{op}."))
        if isinstance(i, str):
            n["kwargs"] = [[k, value if k == i else v] for k, v in n["kwargs"]]
        else:
            n["args"][i] = value
    return edit


CONSTANT_OPS = {   # name -> (function of x [1, 2, 6, 6], a legit second shape)
    "upsample": (lambda x: F.interpolate(x, size=(3, 5)), "2:2,2,8,8"),
    "bilinear": (lambda x: F.interpolate(x, size=(3, 5), mode="bilinear"), "2:2,2,8,8"),
    "adaptive_max": (lambda x: F.adaptive_max_pool2d(x, 2), "2:2,2,8,8"),
    "cdist": (lambda x: torch.cdist(x[0], x[0]), "2:1,2,8,8"),
    "stft": (lambda x: torch.stft(x.flatten(), 8, hop_length=2, win_length=8, return_complex=True).real, "2:1,2,8,8"),
    "unfold": (lambda x: F.unfold(x, 2), "2:2,2,8,8"),
    "histc": (lambda x: torch.histc(x, 4, -1, 1), "2:2,2,8,8"),
    "quantile": (lambda x: x.flatten().quantile(0.25), "2:2,2,8,8"),
    "circular": (lambda x: F.pad(x, (1, 1, 1, 1), mode="circular"), "2:2,2,8,8"),
}

CONSTANT_EDITS = [   # (name, op, edit): each a LoadError
    ("upsample_size_0", "upsample", _node_arg("upsample_nearest2d", 1, [0, 5])),
    ("upsample_size_negative", "upsample", _node_arg("upsample_nearest2d", 1, [-3, 5])),
    ("bilinear_size_0", "bilinear", _node_arg("upsample_bilinear2d", 1, [3, 0])),
    ("adaptive_max_negative", "adaptive_max", _node_arg("adaptive_max_pool2d", 1, [-2, 2])),
    ("cdist_compute_mode_7", "cdist", _node_arg("cdist", 3, 7)),
    ("cdist_p_negative", "cdist", _node_arg("cdist", 2, -1.0)),
    ("stft_hop_0", "stft", _node_arg("stft", 2, 0)),
    ("stft_window_over_n_fft", "stft", _node_arg("stft", 3, 20)),
    ("im2col_padding_negative", "unfold", _node_arg("im2col", 3, [-5, 0])),
    ("histc_min_over_max", "histc", _node_arg("histc", 2, 5.0)),
    ("quantile_q_1_5", "quantile", _node_arg("quantile", 1, 1.5)),
    ("circular_pad_wraps_twice", "circular", _node_arg("pad", 1, [7, 7, 1, 1])),
]


def _traced(ops: dict, example) -> dict:
    out = {}
    for name, (fn, _) in ops.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[name] = to_bytes(tracejit.trace(fn, (example,)))
    return out


def _op_files() -> dict:
    constant_files = _traced(CONSTANT_OPS, torch.randn(1, 2, 6, 6))
    return {**_traced(OPS, torch.randn(3, 8)), **{f"c_{k}": v for k, v in constant_files.items()}}


def hostile_cases(files: dict | None = None) -> list:
    """``(name, file bytes, input spec, expect)`` in round_problems' form."""
    files = files or _op_files()
    return [(name, rewrite(files[op], edit_doc=edit), X, expect) for name, op, edit, expect in EDITS] + \
        [(name, rewrite(files[f"c_{op}"], edit_doc=edit), X4, "reject") for name, op, edit in CONSTANT_EDITS]


def legit_cases(files: dict | None = None) -> list:
    """The unedited programs on another shape: ``(name, file bytes, input spec, eager's output sum)``."""
    from security_testlib import output_sum
    files = files or _op_files()
    return [(f"legit_{op}", files[op], spec, output_sum(fn, spec)) for op, (fn, spec) in OPS.items()] + \
        [(f"legit_{op}", files[f"c_{op}"], spec, output_sum(fn, spec)) for op, (fn, spec) in CONSTANT_OPS.items()]


# ------------------------------------------------------------------------------------------ open (not fixed)
# **the call's total work** (OPEN: needs support/call_budget.py and the code generator, not this round's files).
# Every op of a call is held to the budget on its own (elements, and WORK_FACTOR x that in multiply-adds), but
# nothing holds their sum: a file that makes one legal 4096 x 4096 matrix and multiplies it by itself k times
# (each product 4096^3, within the per-op work budget) costs k x 1.4 CPU seconds a call on a 3-element input
# (k = 10: 14 s from a 5 KB file; 50,000 nodes, or a submodule called until the expansion limit: hours), and
# k element-by-element ops on a legal 2**25 - 1 element zeros cost k x ~90 ms with no check at all (they make
# no more than their input). /work/wt/hostile25_findings.md proposes a per-call running total.
def work_chain(k: int, kind: str = "mm"):
    """The traced function of the open attack: ``k`` products of a 4096 x 4096 matrix (``mm``) or ``k`` sines
    of a 2**25 - 1 element vector (``sin``), from a factory of the file (trace it, save it, load it, call it)."""
    def fn(x):
        if kind == "sin":
            z = torch.zeros(2 ** 25 - 1) + x.sum()
            for _ in range(k):
                z = z.sin()
            return z.sum()
        a = torch.zeros(4096, 4096) + x.sum()
        for _ in range(k):
            a = a @ a
        return a.sum()
    return fn


