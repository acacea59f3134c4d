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


# ------------------------------------------------------------------------------------------ odd arguments
# Allow-listed ops with odd arguments, each an edit of one saved program (``_Ops``, called on a 3 x 8 input): the
# kernel may refuse them (a TORCH_CHECK: an exception) or the loader / a guard may; none may crash the process, read
# outside a tensor's storage or answer with what eager cannot compute. ``odd_cases()`` gives ``(name, file bytes,
# inputs, kind)``, kind "read" for the cases whose answer would be memory outside a storage (they must not answer).

import torch.nn as nn  # noqa: E402

from security_testlib import graphs, rewrite, to_bytes  # noqa: E402


class _Ops(nn.Module):
    """An op of each kind the edits reach: an index_select and a gather by a buffer of the file, an as_strided and
    a narrow of the input, a sum over a dimension, a transpose, a product by a weight, an embedding."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 8))
        self.register_buffer("idx", torch.tensor([0, 2, 1]))
        self.emb = nn.Embedding(5, 2)

    def forward(self, x):
        a = x.index_select(0, self.idx)
        b = torch.gather(x, 1, self.idx.view(3, 1))
        c = x.as_strided((2, 2), (1, 1))
        d = x.sum(dim=1)
        e = x.narrow(1, 2, 3)
        f = self.w @ x.transpose(0, 1)
        g = self.emb(self.idx)
        return a, b, c, d, e, f, g


def ops_file() -> bytes:
    torch.manual_seed(0)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import tracejit
        return to_bytes(tracejit.trace(_Ops().eval(), (torch.randn(3, 8),)))


def _node(doc, op: str):
    for g in graphs(doc):
        for n in g["nodes"]:
            if n["op"].startswith(op):
                return n
    raise KeyError(op)


def _args(op: str, **at):
    """An edit setting positional arguments of the first ``op`` node (``at``: ``{"i1": value}``)."""
    def edit(doc):
        n = _node(doc, op)
        for k, v in at.items():
            i = int(k[1:])
            while len(n["args"]) <= i:
                n["args"].append(None)
            n["args"][i] = v
    return edit


def _tensor(name: str, values, dtype=torch.int64):
    def edit(tensors):
        key = next(k for k in tensors if k.endswith(name))
        tensors[key] = torch.tensor(values, dtype=dtype)
    return edit


def _input_dtype(dtype: str):
    def edit(doc):
        graphs(doc)[0]["inputs"][0]["type"]["dtype"] = dtype
    return edit


def _hint(*hints):
    def edit(doc):
        g = graphs(doc)[0]
        for inp, h in zip(g["inputs"], hints):
            inp["hint"] = h
    return edit


ODD_ARGS = {   # name -> (edit of the document, kind)
    "as_strided_outside_storage": (_args("aten::as_strided", i1={"tuple": [100, 100]}, i2={"tuple": [100, 1]}),
                                   "read"),
    "as_strided_offset_2_40": (_args("aten::as_strided", i3=2 ** 40), "read"),
    "as_strided_offset_negative": (_args("aten::as_strided", i3=-5), "read"),
    "as_strided_negative_stride": (_args("aten::as_strided", i2={"tuple": [-1, 1]}), "read"),
    "as_strided_huge_stride": (_args("aten::as_strided", i2={"tuple": [2 ** 62, 1]}), "read"),
    "as_strided_zero_stride_huge": (_args("aten::as_strided", i1={"tuple": [2 ** 31, 2 ** 31]},
                                          i2={"tuple": [0, 0]}), "any"),
    "sum_dim_99": (_args("aten::sum", i1=[99]), "any"),
    "sum_dim_minus_2_62": (_args("aten::sum", i1=[-2 ** 62]), "any"),
    "narrow_start_negative_long": (_args("aten::narrow", i2=-5, i3=100), "read"),
    "narrow_length_2_62": (_args("aten::narrow", i3=2 ** 62), "read"),
    "transpose_dim_2_62": (_args("aten::transpose", i2=2 ** 62), "any"),
    "gather_dim_7": (_args("aten::gather", i1=7), "read"),
    "index_select_dim_minus_9": (_args("aten::index_select", i1=-9), "read"),
}

ODD_TENSORS = {   # name -> (edit of the tensors, kind)
    "index_out_of_range": (_tensor("idx", [0, 2, 99]), "read"),
    "index_negative": (_tensor("idx", [0, -100, 1]), "read"),
    "index_2_62": (_tensor("idx", [0, 2 ** 62, 1]), "read"),
    "index_as_int32": (_tensor("idx", [0, 2, 1], torch.int32), "any"),
    "index_as_uint8": (_tensor("idx", [0, 2, 1], torch.uint8), "any"),
    "index_as_bool": (_tensor("idx", [True, False, True], torch.bool), "any"),
    "index_as_float": (_tensor("idx", [0.0, 2.0, 1.0], torch.float32), "any"),
    "weight_as_float16": (lambda t: t.update({k: v.half() for k, v in t.items() if k.endswith("w")}), "any"),
    "weight_as_bfloat16": (lambda t: t.update({k: v.bfloat16() for k, v in t.items() if k.endswith("w")}), "any"),
    "weight_empty": (lambda t: t.update({k: v[:0] for k, v in t.items() if k.endswith("w")}), "any"),
    "weight_as_complex": (lambda t: t.update({k: v.to(torch.complex64) for k, v in t.items() if k.endswith("w")}),
                          "any"),
}

ODD_TYPES = {   # name -> (edit of the document, kind): the types a file claims
    "input_complex64": (_input_dtype("complex64"), "any"),
    "input_bool": (_input_dtype("bool"), "any"),
    "input_uint16": (_input_dtype("uint16"), "any"),
    "input_qint8": (_input_dtype("qint8"), "any"),
    "input_float8": (_input_dtype("float8_e4m3fn"), "any"),
    "input_nonsense_dtype": (_input_dtype("float33"), "any"),
    "input_shape_negative": (lambda d: graphs(d)[0]["inputs"][0]["type"].update(shape=[-3, 8]), "any"),
    "input_shape_empty": (lambda d: graphs(d)[0]["inputs"][0]["type"].update(shape=[0, 8]), "any"),
}

NAMES = {   # input names that collide with what generated code names (codegen must rename them)
    "input_named_torch": "torch",
    "input_named_tensor": "Tensor",
    "input_named_budget_root": "_tj_budget_root",
    "input_named_budget_allow": "_tj_budget_allow",
    "input_named_int_ops": "_tj_int",
    "input_named_self": "self",
    "input_named_builtins": "__builtins__",
    "input_named_keyword": "lambda",
    "input_named_dunder_import": "__import__",
}


def odd_cases() -> list:
    """``(name, file bytes, inputs, kind)``: every edit of ``ops_file()``."""
    raw = ops_file()
    out = []
    for name, (edit, kind) in ODD_ARGS.items():
        out.append((name, rewrite(raw, edit_doc=edit), "1:3,8", kind))
    for name, (edit, kind) in ODD_TENSORS.items():
        out.append((name, rewrite(raw, edit_tensors=edit), "1:3,8", kind))
    for name, (edit, kind) in ODD_TYPES.items():
        out.append((name, rewrite(raw, edit_doc=edit), "1:3,8", kind))
    for name, hint in NAMES.items():
        out.append((name, rewrite(raw, edit_doc=_hint(hint)), "1:3,8", "same"))
    return out


def _dead_graph(n: int):
    """An edit appending a graph of ``n`` adds of the input that no method names (a file's dead weight)."""
    import copy

    def edit(doc):
        gs = graphs(doc)
        dead = copy.deepcopy(gs[0])
        add = next(x for x in dead["nodes"] if x["op"] == "aten::sum.dim_IntList")
        dead["nodes"] = [dict(add, args=[{"v": 0}, [1], False]) for _ in range(n)]
        dead["outputs"] = [{"v": 1}]
        dead["out_spec"] = {"kind": "leaf"}
        gs.append(dead)
    return edit


def _dead_specialization(doc):
    """A specialization of forward whose graph is the method's own graph with its guard contradicted: its
    reason claims one input shape, its graph was traced with another."""
    import copy
    prog = doc["program"]
    gs = graphs(doc)
    g = copy.deepcopy(gs[0])
    g["inputs"][0]["type"]["shape"] = [5, 8]
    gs.append(g)
    prog.setdefault("specializations", []).append({"method": "forward", "graph": len(gs) - 1,
                                                   "reason": "x.shape[0] == 3", "source": None})


STRUCTURE = {   # name -> (edit of the document, kind)
    "dead_graph_5000": (_dead_graph(5000), "any"),
    "dead_graph_20000": (_dead_graph(20000), "any"),
    "dead_graph_100000": (_dead_graph(100000), "any"),
    "contradicting_specialization": (_dead_specialization, "any"),
}


def _flat(x):
    return (x.sum(1) + 1).relu()


def structure_cases() -> list:
    from security_testlib import traced_bytes
    raw = ops_file()
    flat = traced_bytes(_flat, (torch.randn(3, 8),))   # no submodule calls: specializations may name its graph
    return [(name, rewrite(flat if "specialization" in name else raw, edit_doc=edit), "1:3,8", kind)
            for name, (edit, kind) in STRUCTURE.items()]


# ------------------------------------------------------------------------------------------ structures
def dict_io(x: dict) -> dict:
    """A dict in, a dict out (traced with strict=False)."""
    return {"a": x["p"] + 1, "b": x["q"] * 2}


def _in_keys(keys: list):
    """The first positional argument's dict keys (in_spec: (args tuple, kwargs dict); args[0] the dict)."""
    def edit(doc):
        graphs(doc)[0]["in_spec"]["children"][0]["children"][0]["keys"] = keys
    return edit


def _out_keys(keys: list):
    def edit(doc):
        graphs(doc)[0]["out_spec"]["keys"] = keys
    return edit


KEY_EDITS = {   # name -> edit: a dict whose keys repeat (a trace never writes one)
    "output_keys_repeated": _out_keys(["a", "a"]),
    "output_keys_true_and_1": _out_keys([1, True]),
    "input_keys_repeated": _in_keys(["p", "p"]),
}
