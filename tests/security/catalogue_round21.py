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
