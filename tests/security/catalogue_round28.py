"""Hostile files of the round-28 attack round (/work/wt/serve28_findings.md has the table), aimed at what session 28
changed:

- **left-out methods** (serialize/left_out.py, left_out_stubs.py): a module entry's ``left_out`` list names methods
  ``save`` left out (their trace held a Python object that is not data); the loaded module gets a method raising a
  LoadError. Attacks: a left-out root method, one shadowing a held method, a child, a parameter or a module
  attribute, repeated or malformed pairs, a reason with terminal control sequences or of unbounded length, too many
  pairs, a caller whose call to the left-out method is put back, a specialization naming a left-out method;
- **once-per-file op-name facts** (validate._op_name memo shared by a file's graphs; budget_plan per-op facts): two
  graphs that share an op and a name, the second's node breaking the op's schema, dims or outputs; a node whose op
  is not a string after one that is; a graph reused by two modules.

``cases()`` gives ``(name, file bytes, inputs, expectation)``: "load_error" (refused at load), "same" (loads and the
root answers as the unedited program), "stub" (loads, the root answers the same and the left-out method called
directly raises LoadError).
"""
from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from left_out_models import LeftOutModel
from security_testlib import graphs, rewrite, to_bytes


class Shared(nn.Module):
    """One Linear reached under two names, called twice: two paths, one module entry, one graph."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = self.a
        self.c = nn.Linear(8, 8)

    def forward(self, x):
        return self.c(self.b(self.a(x)).relu())


INPUTS = "1:3,8"


def model_file(model_cls=LeftOutModel) -> bytes:
    torch.manual_seed(0)
    import tracejit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_bytes(tracejit.trace(model_cls().eval(), (torch.randn(3, 8),)))


def expected_model(model_cls=LeftOutModel):
    torch.manual_seed(0)
    return model_cls().eval()


def _entry(doc, path: str) -> dict:
    return next(e for e in doc["program"]["modules"] if e["path"] == path)


def _left_out(path: str, value):
    def edit(doc):
        _entry(doc, path)["left_out"] = value
    return edit


def _call_left_out_again(doc):
    """Put back, in the root graph, a call of the left-out ``layer.forward`` where its nodes were inlined: replace
    the root's first node with a call_module node naming it (the loader must find no such method)."""
    root = doc["program"]["graphs"][dict(_entry(doc, "")["methods"])["forward"]]
    first = next(i for i, n in enumerate(root["nodes"]) if n["op"].startswith("aten::"))
    n = root["nodes"][first]
    root["nodes"][first] = {**n, "op": "tracejit::call_module", "target": "", "kwargs": [],
                            "attrs": {"path": "layer", "method": "forward", "n_captures": 0}, "args": [{"v": 0}]}


def _specialize_left_out(doc):
    g = dict(_entry(doc, "")["methods"])["forward"]
    doc["program"]["specializations"] = [{"method": "layer.forward", "graph": g, "reason": "r", "source": None}]


def _second_graph(break_node):
    """An edit appending a copy of the root graph whose first ``aten::linear`` node ``break_node`` changes, and
    naming it as ``head``'s method ``forward`` (a second graph sharing the first's ops and name)."""
    def edit(doc):
        gs = graphs(doc)
        root = gs[dict(_entry(doc, "")["methods"])["forward"]]
        head = gs[dict(_entry(doc, "head")["methods"])["forward"]]
        twin = copy.deepcopy(head)
        twin["name"] = root["name"]
        node = next(n for n in twin["nodes"] if n["op"].startswith("aten::linear"))
        break_node(node)
        gs.append(twin)
        _entry(doc, "head")["methods"] = [["forward", len(gs) - 1]]
    return edit


def _same_graph_twice(doc):
    """``c``'s method names the graph of ``a`` (same ops, same name, another module): loads, answers as before
    when the weights' shapes agree."""
    _entry(doc, "c")["methods"] = [["forward", dict(_entry(doc, "a")["methods"])["forward"]]]


LEFT_OUT = {   # name -> (edit of the LeftOutModel file, expectation)
    "unedited": (None, "stub"),
    "left_out_on_root": (_left_out("", [["forward", "x"]]), "load_error"),
    "left_out_shadows_held_method": (_left_out("head", [["forward", "x"]]), "load_error"),
    "left_out_names_a_parameter": (_left_out("head", [["weight", "x"]]), "load_error"),
    "left_out_names_a_child": (_left_out("layer", [["lin", "x"]]), "load_error"),
    "left_out_dunder_class": (_left_out("layer", [["__class__", "x"]]), "load_error"),
    "left_out_private_parameters": (_left_out("layer", [["_parameters", "x"]]), "load_error"),
    "left_out_named_to": (_left_out("layer", [["to", "x"]]), "load_error"),
    "left_out_named_training": (_left_out("layer", [["training", "x"]]), "load_error"),
    "left_out_twice": (_left_out("layer", [["forward", "x"], ["forward", "y"]]), "load_error"),
    "left_out_not_a_list": (_left_out("layer", {"forward": "x"}), "load_error"),
    "left_out_pair_of_three": (_left_out("layer", [["forward", "x", "y"]]), "load_error"),
    "left_out_reason_number": (_left_out("layer", [["forward", 1]]), "load_error"),
    "left_out_reason_huge": (_left_out("layer", [["forward", "x" * 100_000]]), "load_error"),
    "left_out_257_pairs": (_left_out("layer", [[f"m{i}", "x"] for i in range(257)]), "load_error"),
    "left_out_reason_terminal_escape": (_left_out("layer", [["forward", "\x1b]0;pwned\x07\x1b[2J"]]), "stub"),
    "left_out_extra_name_on_head": (_left_out("head", [["extra", "x"]]), "same"),
    "caller_calls_left_out_again": (_call_left_out_again, "load_error"),
    "specialization_names_left_out": (_specialize_left_out, "load_error"),
    "twin_graph_args_broken": (_second_graph(lambda n: n.update(args=n["args"][:1])), "load_error"),
    "twin_graph_kwarg_unknown": (_second_graph(lambda n: n.update(kwargs=[["nonsense", 1]])), "load_error"),
    "twin_graph_outputs_broken": (_second_graph(lambda n: n.update(outputs=[])), "load_error"),
    "twin_graph_overload_unknown": (_second_graph(lambda n: n.update(op="aten::linear.nonsense")), "load_error"),
    "twin_graph_op_a_list": (_second_graph(lambda n: n.update(op=["aten::linear"])), "load_error"),
    "twin_graph_op_denied": (_second_graph(lambda n: n.update(op="aten::set_")), "load_error"),
}

SHARED = {   # edits of the Shared file
    "shared_module_unedited": (None, "same"),
    "graph_reused_by_two_modules": (_same_graph_twice, "same"),
    "left_out_on_shared_module": (_left_out("a", [["extra", "x"]]), "same"),
}


def cases() -> list:
    """``(name, file bytes, inputs, expectation)`` for every edit above."""
    out = []
    for raw, table in ((model_file(LeftOutModel), LEFT_OUT), (model_file(Shared), SHARED)):
        for name, (edit, expect) in table.items():
            out.append((name, raw if edit is None else rewrite(raw, edit_doc=edit), INPUTS, expect))
    return out
