"""Hostile files of the round-21 attack round (/work/wt/hostile21_findings.md has the whole table).

**Viewer** (``tracejit view``, tracejit/viewer/): files that load, whose page did not render, hung the
browser or grew with the square of a part of the file; each an edit of a real save, the CRC recomputed:

- ``flat_chain_2000``: 2,000 negations in one graph: dagre's recursion overflowed the stack (the page stayed
  blank); ``flat_chain_30000`` too, and it would draw 30,000 nodes at once;
- ``add_chain_1000``: 1,000 adds each also taking the first input: dagre's layout ran for minutes (every edge
  spans all the ranks above it: ~500,000 dummy nodes);
- ``dict_outputs_2000`` / ``input_list_3000``: the output (input) structure was written into each of its
  2,000 (3,000) nodes: an 84 KB file made a 94 MB page, a 511 KB file a 115 MB one;
- ``shared_graph_sources_2000``: one graph with 4 KB source lines shared by 2,000 modules: each description
  repeated them (1.1 MB file, 50 MB page);
- ``nested_600``: modules nested 600 deep (the loader takes it): the document's recursive description raised
  RecursionError (``tracejit view``: "RecursionError: maximum recursion depth exceeded").

``viewer_cases()`` gives ``(name, file bytes)``.
"""
from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

import tracejit
from security_testlib import graphs, module, rewrite, to_bytes


class _Tools(nn.Module):
    """A size read, a submodule (a Linear) and a dict output: what the viewer cases edit."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return {"out": self.lin(x).relu() * x.size(0)}


class _Wrap(nn.Module):
    def __init__(self, child):
        super().__init__()
        self.c = child

    def forward(self, x):
        return self.c(x) + 1


def _saved(m, x) -> bytes:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_bytes(tracejit.trace(m.eval(), x, strict=False))


def _values(g) -> int:
    return len(g["inputs"]) + sum(len(n["outputs"]) for n in g["nodes"])


def _tensor_type(g):
    return next(n["outputs"][0] for n in g["nodes"] if n["outputs"] and "shape" in n["outputs"][0])


def _chain(n: int, op: str):
    """The root graph followed by ``n`` ops, each on the previous one (``add``: and on the first input too)."""
    def edit(doc):
        g = graphs(doc)[0]
        first, t = _values(g), _tensor_type(g)
        for i in range(n):
            prev = {"v": first + i - 1 if i else 0}
            args = [prev, {"v": 0}] if op == "add" else [prev]
            g["nodes"].append({"op": f"aten::{op}.Tensor" if op == "add" else f"aten::{op}.default",
                               "target": f"method:{op}", "args": args, "outputs": [t]})
        g["outputs"], g["out_spec"] = [{"v": first + n - 1}], {"kind": "leaf"}
    return edit


def _dict_outputs(n: int):
    def edit(doc):
        g = graphs(doc)[0]
        g["outputs"] = [g["outputs"][0]] * n
        g["out_spec"] = {"children": [{"kind": "leaf"}] * n, "keys": [f"k{i}" for i in range(n)], "kind": "dict",
                         "name": "dict"}
    return edit


def _input_list(n: int):
    def edit(doc):
        g = graphs(doc)[0]
        t = g["inputs"][0]["type"]
        g["inputs"] = [{"dynamic": True, "hint": f"x{i}", "type": t} for i in range(n)]
        g["input_leaves"] = [{"v": i} for i in range(n)]
        g["arg_names"] = [f"x_{i}" for i in range(n)]
        g["in_spec"]["children"][0]["children"] = [{"kind": "list", "children": [{"kind": "leaf"}] * n}]
        g["nodes"] = [x for x in g["nodes"] if x["op"] == "tracejit::guard" and not x["args"]]
        g["outputs"], g["out_spec"] = [{"v": 0}], {"kind": "leaf"}
    return edit


def _shared_sources(mods: int, length: int):
    """The Linear's graph (4 KB source lines) shared by ``mods`` copies of the Linear, each called by the root."""
    def edit(doc):
        lin_graph = graphs(doc)[module(doc, "lin")["methods"][0][1]]
        for n in lin_graph["nodes"]:
            n["source"] = ["S" * length, 1, "f" * length]
        root, g0 = module(doc, ""), graphs(doc)[0]
        t = dict(g0["inputs"][0]["type"], requires_grad=True)
        for i in range(mods):
            m = copy.deepcopy(module(doc, "lin"))
            m["path"] = f"l{i}"
            doc["program"]["modules"].append(m)
            root["children"].append([f"l{i}", f"l{i}"])
            g0["nodes"].append({"op": "tracejit::call_module", "target": "", "args": [{"v": 0}], "outputs": [t],
                                "attrs": {"method": "forward", "n_captures": 0, "path": f"l{i}"}})
    return edit


def _nested(depth: int):
    """``depth`` modules each calling the next once (the middle module of a traced _Wrap(_Wrap(ReLU)) repeated)."""
    def edit(doc):
        mods = {m["path"]: m for m in doc["program"]["modules"]}
        out, path = [mods[""]], ""
        for _ in range(depth):
            path = f"{path}.c" if path else "c"
            m = copy.deepcopy(mods["c"])
            m["path"], m["children"] = path, [["c", f"{path}.c"]]
            out.append(m)
        last = copy.deepcopy(mods["c.c"])
        last["path"] = f"{path}.c"
        out.append(last)
        doc["program"]["modules"] = out
    return edit


def viewer_cases() -> list:
    tools = _saved(_Tools(), torch.randn(3, 4))
    nested = _saved(_Wrap(_Wrap(nn.ReLU())), torch.randn(3, 4))
    return [
        ("flat_chain_2000", rewrite(tools, edit_doc=_chain(2000, "neg"))),
        ("flat_chain_30000", rewrite(tools, edit_doc=_chain(30000, "neg"))),
        ("add_chain_1000", rewrite(tools, edit_doc=_chain(1000, "add"))),
        ("dict_outputs_2000", rewrite(tools, edit_doc=_dict_outputs(2000))),
        ("input_list_3000", rewrite(tools, edit_doc=_input_list(3000))),
        ("shared_graph_sources_2000", rewrite(tools, edit_doc=_shared_sources(2000, 4096))),
        ("nested_600", rewrite(nested, edit_doc=_nested(600))),
        ("no_methods", rewrite(tools, edit_doc=lambda doc: module(doc, "")["methods"].clear())),
    ]


# ------------------------------------------------------------------------------------------ op constants
# **constants** (round 21): int arguments the kernels refuse, which loaded and raised a raw RuntimeError /
# IndexError at the first call: narrow / select / topk / kthvalue / unfold / one_hot / roll (-2**63) / the splits /
# diff / repeat_interleave / renorm / fft n, and a ``dim`` of any op on ``self`` outside its rank (gather, sort,
# transpose, squeeze, movedim, take_along_dim, ...). Now each is a LoadError naming the node and the argument,
# or (one_hot's class values, data) a GuardError at the call before the kernel runs.
X = "1:3,8"
M = -2 ** 63


def _op_nodes(doc, prefix):
    return [n for g in graphs(doc) for n in g["nodes"] if n["op"].startswith(prefix)]


def _set(prefix, i, value):
    return lambda doc: _op_nodes(doc, prefix)[0]["args"].__setitem__(i, value)


def _append(prefix, value):
    return lambda doc: _op_nodes(doc, prefix)[0]["args"].append(value)


def _classes(x):
    return torch.nn.functional.one_hot((x.abs() * 2).long().clamp(max=3), 4)


_IDX = torch.tensor([[0], [2], [1]])

OPS = {   # name -> (function of x [3, 8], a legit second shape)
    "narrow": (lambda x: x.narrow(1, 2, 3), "2:4,6"),
    "narrow_copy": (lambda x: torch.narrow_copy(x, 1, 2, 3), "2:4,6"),
    "select": (lambda x: x.select(1, 2), "2:4,6"),
    "topk": (lambda x: x.topk(3).values, "2:4,6"),
    "kthvalue": (lambda x: x.kthvalue(3).values, "2:4,6"),
    "unfold": (lambda x: x.unfold(1, 3, 2), "2:4,6"),
    "one_hot": (_classes, "2:4,6"),
    "roll": (lambda x: torch.roll(x, 2, 1), "2:4,6"),
    "tensor_split": (lambda x: x.tensor_split(3, 1)[0], "2:4,9"),
    "diff": (lambda x: torch.diff(x, 2, 1), "2:4,6"),
    "repeat_interleave": (lambda x: x.repeat_interleave(2, 1), "2:4,6"),
    "renorm": (lambda x: x.renorm(2, 0, 1.0), "2:4,6"),
    "fft": (lambda x: torch.fft.fft(x, 4, 1).real, "2:4,6"),
    "gather": (lambda x: x.gather(1, _IDX.expand(x.shape[0], 1)[:3]), "2:3,6"),
    "sort": (lambda x: x.sort(1).values, "2:4,6"),
    "transpose": (lambda x: x.transpose(0, 1), "2:4,6"),
    "squeeze": (lambda x: x.unsqueeze(1).squeeze(1), "2:4,6"),
    "movedim": (lambda x: x.movedim(0, 1), "2:4,6"),
    "diag_embed": (lambda x: torch.diag_embed(x, 0, 1, 2), "2:4,6"),   # dims of the output's rank: allowed
    "slice": (lambda x: x[:, 1:7:2] * 2, "2:4,9"),
    "permute": (lambda x: x.permute(1, 0), "2:4,6"),
    "flip": (lambda x: x.flip([0, 1]), "2:4,6"),
    "diagonal": (lambda x: x.diagonal(1, 0, 1), "2:4,6"),
    "sum_dims": (lambda x: x.sum([0, 1]), "2:4,6"),
    "amax_dims": (lambda x: x.amax([0, 1]), "2:4,6"),
    "var_dims": (lambda x: x.var([0, 1]), "2:4,6"),
    "fftn": (lambda x: torch.fft.fftn(x, dim=[0, 1]).real, "2:4,6"),
    "roll_one_dim_twice": (lambda x: torch.roll(x, [1, 2], [1, 1]), "2:4,6"),   # repeats allowed: a legit file
    "tile": (lambda x: x.tile((3, 2)), "2:4,6"),   # its dims are repetitions: 3 on a rank-2 input is fine
}

EDITS = [   # (name, op, edit, expect)
    ("narrow_start_9", "narrow", _set("aten::narrow", 2, 9), "reject"),
    ("narrow_start_int64_min", "narrow", _set("aten::narrow", 2, M), "reject"),
    ("narrow_length_negative", "narrow", _set("aten::narrow", 3, -1), "reject"),
    ("narrow_past_the_end", "narrow", _set("aten::narrow", 3, 7), "reject"),
    ("narrow_dim_5", "narrow", _set("aten::narrow", 1, 5), "reject"),
    ("narrow_copy_past_the_end", "narrow_copy", _set("aten::narrow_copy", 3, 7), "reject"),
    ("slice_step_0", "slice", _set("aten::slice", 4, 0), "reject"),
    ("slice_step_negative", "slice", _set("aten::slice", 4, -1), "reject"),
    ("select_index_8", "select", _set("aten::select", 2, 8), "reject"),
    ("select_index_int64_min", "select", _set("aten::select", 2, M), "reject"),
    ("topk_k_9", "topk", _set("aten::topk", 1, 9), "reject"),
    ("topk_k_negative", "topk", _set("aten::topk", 1, -1), "reject"),
    ("topk_k_2_40", "topk", _set("aten::topk", 1, 2 ** 40), "reject"),
    ("topk_dim_5", "topk", _append("aten::topk", 5), "reject"),
    ("kthvalue_k_0", "kthvalue", _set("aten::kthvalue", 1, 0), "reject"),
    ("kthvalue_k_9", "kthvalue", _set("aten::kthvalue", 1, 9), "reject"),
    ("unfold_step_0", "unfold", _set("aten::unfold", 3, 0), "reject"),
    ("unfold_step_negative", "unfold", _set("aten::unfold", 3, -2), "reject"),
    ("unfold_size_9", "unfold", _set("aten::unfold", 2, 9), "reject"),
    ("unfold_size_negative", "unfold", _set("aten::unfold", 2, -1), "reject"),
    ("unfold_dimension_2", "unfold", _set("aten::unfold", 1, 2), "reject"),
    ("one_hot_classes_negative", "one_hot", _set("aten::one_hot", 1, -5), "reject"),
    ("one_hot_classes_0", "one_hot", _set("aten::one_hot", 1, 0), "reject"),
    ("one_hot_classes_2", "one_hot", _set("aten::one_hot", 1, 2), "call_refused"),
    ("roll_shift_int64_min", "roll", _set("aten::roll", 1, M), "reject"),
    ("roll_shift_list_int64_min", "roll", _set("aten::roll", 1, [M]), "reject"),
    ("tensor_split_0", "tensor_split", _set("aten::tensor_split", 1, 0), "reject"),
    ("tensor_split_negative", "tensor_split", _set("aten::tensor_split", 1, -2), "reject"),
    ("diff_order_negative", "diff", _set("aten::diff", 1, -1), "reject"),
    ("repeat_interleave_negative", "repeat_interleave", _set("aten::repeat_interleave", 1, -1), "reject"),
    ("renorm_p_0", "renorm", _set("aten::renorm", 1, 0.0), "reject"),
    ("renorm_maxnorm_negative", "renorm", _set("aten::renorm", 3, -1.0), "reject"),
    ("fft_n_0", "fft", _set("aten::fft_fft", 1, 0), "reject"),
    ("fft_n_negative", "fft", _set("aten::fft_fft", 1, -4), "reject"),
    ("gather_dim_5", "gather", _set("aten::gather", 1, 5), "reject"),
    ("sort_dim_9", "sort", _set("aten::sort", 1, 9), "reject"),
    ("transpose_dim_7", "transpose", _set("aten::transpose", 2, 7), "reject"),
    ("squeeze_dim_7", "squeeze", _set("aten::squeeze", 1, 7), "reject"),
    ("movedim_destination_5", "movedim", _set("aten::movedim", 2, 5), "reject"),
    ("permute_repeated", "permute", lambda d: _op_nodes(d, "aten::permute")[0]["args"].__setitem__(2, 1), "reject"),
    ("permute_short", "permute", lambda d: _op_nodes(d, "aten::permute")[0]["args"].pop(), "reject"),
    ("flip_repeated", "flip", _set("aten::flip", 1, [1, -1]), "reject"),
    ("diagonal_same_dims", "diagonal", _set("aten::diagonal", 3, 0), "reject"),
    ("sum_dims_repeated", "sum_dims", _set("aten::sum", 1, [1, -1]), "reject"),
    ("amax_dims_repeated", "amax_dims", _set("aten::amax", 1, [0, 0]), "reject"),
    ("var_dims_repeated", "var_dims", _set("aten::var", 1, [1, 1]), "reject"),
    ("fftn_dims_repeated", "fftn", lambda d: [p.__setitem__(1, [0, -2]) for p in
                                              _op_nodes(d, "aten::fft_fftn")[0]["kwargs"] if p[0] == "dim"], "reject"),
]


def _eigh_of_zeros(x):
    return torch.linalg.eigh(torch.zeros(4, 4) + x.sum()).eigenvalues


def _zeros(n):
    return lambda doc: _op_nodes(doc, "aten::zeros")[0].__setitem__("args", [n, n])


OPS["eigh"] = (_eigh_of_zeros, "2:4,6")
# **work** (round 21): a factorization's input within the element budget, its work cubic: eigh of a file's
# zeros(5000, 5000) ran 14.6 CPU seconds a call (random data: longer); now a BudgetError before it runs
EDITS.append(("eigh_of_zeros_5000", "eigh", _zeros(5000), "call_refused"))
OPS["nuclear_norm"] = (lambda x: torch.nuclear_norm(torch.zeros(4, 4) + x.sum()), "2:4,6")
EDITS.append(("nuclear_norm_of_zeros_5000", "nuclear_norm", _zeros(5000), "call_refused"))   # an SVD


def _op_files() -> dict:
    out = {}
    for name, (fn, _) in OPS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[name] = to_bytes(tracejit.trace(fn, (torch.randn(3, 8),)))
    return out


def hostile_cases(files: dict | None = None) -> list:
    """``(name, file bytes, input spec, expect)`` in round_problems' form."""
    files = files or _op_files()
    return [(name, rewrite(files[op], edit_doc=edit), X, expect) for name, op, edit, expect in EDITS]


def legit_cases(files: dict | None = None) -> list:
    """The unedited programs on another shape: ``(name, file bytes, input spec, eager's output sum)``."""
    from security_testlib import output_sum
    files = files or _op_files()
    return [(f"legit_{op}", files[op], spec, output_sum(fn, spec)) for op, (fn, spec) in OPS.items()]
