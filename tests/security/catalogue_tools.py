"""Crafted files for the program's structure at load and for every tool (issue #21, items 4, 5, 6):
exponential call graphs, amplification at load, superlinear inspect / view, strings that break an
HTML page, terminal escapes, method names that shadow attributes, zip edge cases. Each is an edit of
a real save with the CRC recomputed (tests/filesurgery.py), or a zip built byte by byte.

A case is ``(name, file bytes, expect, verbs)``: ``expect`` is ``reject`` (load raises LoadError),
``load`` (loads), or ``any`` (either; the tools must still behave); ``verbs`` are what the child
runs on it (tools_child.py): ``load`` (and call), ``inspect``, ``run``, ``view``, ``export``, ``triton``.
"""
from __future__ import annotations

import copy
import io
import struct
import warnings
import zipfile

import torch
from torch import nn

import tracejit
from security_testlib import graphs, module, rewrite

ALL = ("load", "inspect", "run", "view", "export", "triton")
HTML_BREAKERS = ["<!--<script>", "</script><script>alert(1)//", "<script><!--x", "\u2028</SCRIPT \u2029>"]
TERMINAL = ["\x1b[2J\x1b]0;owned\x07", "x\n  crc32:   00000000 (stored; verified)", "\u202eevil\r\x9b[1m\x08"]


# ------------------------------------------------------------------------------------------ bases
class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()


class Tools(nn.Module):
    """A size read, a size guard, a submodule, an einsum string and a dict output."""

    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        n = x.size(0)
        if x.size(1) == 4:
            x = x * 2
        y = self.inner(x)
        return {"out": y * n, "z": torch.einsum("bi,bj->bij", y, x)}


class Twice(nn.Module):
    """Calls its child twice: the step of an exponential call chain."""

    def __init__(self, child):
        super().__init__()
        self.c = child

    def forward(self, x):
        return self.c(self.c(x))


class Repeat(nn.Module):
    """Calls one submodule ten times: a file whose calls expand (inlined for export) to 10x its nodes."""

    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        for _ in range(10):
            x = self.inner(x)
        return x


def repeat_base() -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _bytes(tracejit.trace(Repeat().eval(), torch.randn(3, 4)))


def tools_base() -> tuple:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tools = tracejit.trace(Tools().eval(), torch.randn(3, 4), strict=False)
        chain = tracejit.trace(Twice(Twice(nn.ReLU())).eval(), torch.randn(3, 4))
    return _bytes(tools), _bytes(chain)


def _bytes(traced) -> bytes:
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return buf.getvalue()


def _edit(raw, fn):
    return rewrite(raw, edit_doc=fn)


def _sources(doc):
    return [n for g in graphs(doc) for n in g["nodes"] if n.get("source")]


def _guard(doc, kind="size"):
    return next(n for n in graphs(doc)[0]["nodes"] if n["op"] == "tracejit::guard" and n["attrs"]["kind"] == kind)


def _rename_param(doc, new):
    m = module(doc, "inner.lin")
    m["parameters"] = [[new if n == "weight" else n, p] for n, p in m["parameters"]]
    for n in graphs(doc)[2]["nodes"]:
        if n["op"] == "tracejit::get_attr" and n["attrs"]["path"] == "weight":
            n["attrs"]["path"] = new


# string positions: where a file's text reaches a tool
POSITIONS = {
    "root_type": lambda d, s: module(d, "").__setitem__("type", s),
    "inner_type": lambda d, s: module(d, "inner").__setitem__("type", s),
    "graph_module_type": lambda d, s: graphs(d)[1].__setitem__("module_type", s),
    "source_file": lambda d, s: [n["source"].__setitem__(0, s) for n in _sources(d)],
    "source_function": lambda d, s: [n["source"].__setitem__(2, s) for n in _sources(d)],
    "ledger_message": lambda d, s: d["program"]["ledger"][1].__setitem__("message", s),
    "ledger_source": lambda d, s: d["program"]["ledger"][1]["source"].__setitem__(0, s),
    "ledger_kind": lambda d, s: d["program"]["ledger"][1].__setitem__("kind", s),
    "parameter_name": _rename_param,
    "argument_name": lambda d, s: (graphs(d)[0].__setitem__("arg_names", [s]),
                                   graphs(d)[0]["inputs"][0].__setitem__("hint", s)),
    "dict_key": lambda d, s: graphs(d)[0]["out_spec"]["keys"].__setitem__(0, s),
    "guard_text": lambda d, s: _guard(d)["attrs"].__setitem__("what", s),
    "einsum_string": lambda d, s: next(n for n in graphs(d)[0]["nodes"] if n["op"].startswith("aten::einsum"))[
        "args"].__setitem__(0, s),
    "tracejit_version": lambda d, s: d.__setitem__("tracejit_version", s),
}


def string_cases(tools: bytes) -> list:
    """Every string position, with HTML breakers (the viewer's page) and terminal escapes (every verb)."""
    cases = []
    for where, put in POSITIONS.items():
        for i, s in enumerate(HTML_BREAKERS):
            cases.append((f"html_{where}_{i}", _edit(tools, lambda d, p=put, s=s: p(d, s)), "any", ("load", "view")))
        for i, s in enumerate(TERMINAL):
            cases.append((f"terminal_{where}_{i}", _edit(tools, lambda d, p=put, s=s: p(d, s)), "any", ALL))
    return cases


# ------------------------------------------------------------------------------------------ structure
def _chain(chain: bytes, depth: int) -> bytes:
    """``depth`` modules, each calling the next twice (graph 1 of the traced Twice(Twice(ReLU)))."""
    def edit(doc):
        mods = {m["path"]: m for m in doc["program"]["modules"]}
        mid, leaf = mods["c"], mods["c.c"]
        out, path = [mods[""]], ""
        for _ in range(depth):
            path = f"{path}.c" if path else "c"
            m = copy.deepcopy(mid)
            m["path"], m["children"] = path, [["c", f"{path}.c"]]
            out.append(m)
        last = copy.deepcopy(leaf)
        last["path"] = f"{path}.c"
        out.append(last)
        doc["program"]["modules"] = out
    return _edit(chain, edit)


def _diamonds(tools: bytes, depth: int) -> bytes:
    """``depth`` modules each holding the next twice (l and r): 2^depth paths to the last."""
    def edit(doc):
        mods = doc["program"]["modules"]
        module(doc, "")["children"].append(["s", "s0"])
        for i in range(depth):
            mods.append({"buffers": [], "children": [["l", f"s{i + 1}"], ["r", f"s{i + 1}"]], "methods": [],
                         "non_persistent": [], "parameters": [], "path": f"s{i}", "training": False, "type": "Diamond"})
        mods.append({"buffers": [], "children": [], "methods": [], "non_persistent": [], "parameters": [],
                     "path": f"s{depth}", "training": False, "type": "Diamond"})
    return _edit(tools, edit)


def _root_methods(doc, names):
    module(doc, "")["methods"] += [[n, 0] for n in names]


def _guard_list(doc, n, methods):
    _guard(doc)["attrs"]["expected"] = list(range(n))
    _root_methods(doc, [f"m{i}" for i in range(methods)])


def _long_graph(doc, n, methods):
    g = graphs(doc)[1]   # Inner.forward: a chain of n negations before its relu
    first = len(g["inputs"]) + len(g["nodes"])
    out_t = g["nodes"][-1]["outputs"][0]
    chain = [{"op": "aten::neg.default", "target": "method:neg", "args": [{"v": first + i - 1 if i else first - 1}],
              "kwargs": [], "outputs": [out_t], "dynamic": True} for i in range(n)]
    g["nodes"] += chain
    g["outputs"] = [{"v": first + n - 1}]
    module(doc, "inner")["methods"] += [[f"m{i}", 1] for i in range(methods)]


def _negations(doc, n):
    """Inner.forward (graph 1) followed by ``n`` negations, each node as small as the format allows (about
    12 values: the document's 500,000-value limit holds a graph to about 40,000 such nodes)."""
    g = graphs(doc)[1]
    first = len(g["inputs"]) + len(g["nodes"])
    out_t = g["nodes"][-1]["outputs"][0]
    g["nodes"] += [{"op": "aten::neg.default", "target": "method:neg", "args": [{"v": first + i - 1 if i else first - 1}],
                    "outputs": [out_t]} for i in range(n)]
    g["outputs"] = [{"v": first + n - 1}]


def export_cases(tools: bytes) -> list:
    """Valid programs too big to export quickly (onnxscript lowers ~0.5 ms a node): 49,941 nodes once the ten
    calls of a 4,990-node submodule are inlined (a 1 MB file); the full sweep (scripts/hostile_sweep.py) adds
    single graphs of 20,000 and 40,000 nodes (the second over the document's value limit). Export refuses
    them in one line naming the count, the limit and the flag."""
    return [("nodes_50000_inlined", _edit(repeat_base(), lambda d: _negations(d, 4990)), "load",
             ("load", "export", "triton"))]


def _many_sizes(doc, inputs: int, rank: int):
    """``inputs`` inputs of rank ``rank``, every size read: inputs * rank symbolic sizes."""
    g = graphs(doc)[0]
    t = {"device": "cpu", "dtype": "float32", "requires_grad": False, "shape": [2] * rank}
    g["inputs"] = [{"dynamic": True, "hint": f"x{i}", "type": t} for i in range(inputs)]
    g["input_leaves"] = [{"v": i} for i in range(inputs)]
    g["arg_names"] = g["param_names"] = [f"x{i}" for i in range(inputs)]
    g["in_spec"]["children"][0]["children"] = [{"kind": "leaf"}] * inputs
    g["nodes"] = [g["nodes"][0]] + [{"op": "aten::size.int", "target": "method:size", "args": [{"v": i}, d],
                                     "kwargs": [], "outputs": [{"scalar": "int"}], "dynamic": True}
                                    for i in range(inputs) for d in range(rank)]
    g["outputs"], g["out_spec"] = [{"v": 0}], {"kind": "leaf"}


def _dict_outputs(doc, n):
    g = graphs(doc)[0]
    g["outputs"] = [g["outputs"][i % 2] for i in range(n)]
    g["out_spec"] = {"children": [{"kind": "leaf"}] * n, "keys": [f"k{i}" for i in range(n)], "kind": "dict",
                     "name": "dict"}


SIZE_VERBS = ("load", "inspect", "view", "run", "export")   # export refuses more than 1,024 input dimensions


def structure_cases(tools: bytes, chain: bytes) -> list:
    return [
        ("chain_40_calls_twice", _chain(chain, 40), "reject", ALL),
        ("chain_24_calls_twice", _chain(chain, 24), "reject", ALL),
        ("chain_8_calls_twice", _chain(chain, 8), "load", ALL),
        ("paths_40_diamonds", _diamonds(tools, 40), "reject", ALL),
        ("paths_20_diamonds", _diamonds(tools, 20), "reject", ALL),
        ("paths_8_diamonds", _diamonds(tools, 8), "load", ALL),
        ("guard_list_100k_x40_methods", _edit(tools, lambda d: _guard_list(d, 100_000, 40)), "any", ALL),
        ("guard_list_expected_list", _edit(tools, lambda d: _guard_list(d, 3, 0)), "any", ALL),
        ("nodes_1000_x190_methods", _edit(tools, lambda d: _long_graph(d, 1000, 190)), "load", ALL),
        # 19,200 nodes: load, inspect, view and run are linear in them (test_tool_files.py); export is linear
        # too but pays onnxscript's per-node schema conversion and shape inference, about 0.7 ms a node
        # (3.6 s for 4,800, 13 s for 19,200 measured), so it is not run on these files
        ("symbolic_sizes_4800", _edit(tools, lambda d: _many_sizes(d, 600, 8)), "any", SIZE_VERBS),
        ("symbolic_sizes_19200", _edit(tools, lambda d: _many_sizes(d, 2400, 8)), "any", SIZE_VERBS),
        ("symbolic_sizes_34560", _edit(tools, lambda d: _many_sizes(d, 4320, 8)), "any", SIZE_VERBS),
        ("dict_outputs_2000", _edit(tools, lambda d: _dict_outputs(d, 2000)), "load", ALL),
    ]


# ------------------------------------------------------------------------------------------ method names
SHADOWED = ["training", "original_name", "ledger", "graph", "code", "state_dict", "eval", "inlined_graph",
            "T_destination", "dump_patches", "call_super_init", "specializations", "inner"]


def method_name_cases(tools: bytes) -> list:
    cases = [(f"root_method_{n}", _edit(tools, lambda d, n=n: _root_methods(d, [n])), "reject", ("load", "inspect"))
             for n in SHADOWED]
    cases.append(("root_method_encode", _edit(tools, lambda d: _root_methods(d, ["encode"])), "load",
                  ("load", "inspect", "view")))
    cases.append(("inner_method_lin", _edit(tools, lambda d: module(d, "inner")["methods"].append(["lin", 1])),
                  "reject", ("load",)))
    cases.append(("param_method_weight", _edit(tools, lambda d: module(d, "inner.lin")["methods"].append(
        ["weight", 2])), "reject", ("load",)))
    return cases


# ------------------------------------------------------------------------------------------ zip files
def _zip(names, extract_version=None, flag_bits=None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n in names:
            z.writestr(n, b"\x80\x02}q\x00.")
    raw = bytearray(buf.getvalue())
    at = raw.find(b"PK\x01\x02")
    while at >= 0:   # central directory entries: version needed (offset 6), flags (offset 8)
        if extract_version is not None:
            raw[at + 6:at + 8] = struct.pack("<H", extract_version)
        if flag_bits is not None:
            raw[at + 8:at + 10] = struct.pack("<H", flag_bits)
        at = raw.find(b"PK\x01\x02", at + 4)
    return bytes(raw)


def _zip_bad_name() -> bytes:
    raw = bytearray(_zip(["archive/code/x.py"], flag_bits=0x800))
    at = raw.find(b"archive/code", raw.find(b"PK\x01\x02"))
    raw[at:at + 2] = b"\xff\xfe"   # a name flagged UTF-8 that is not
    return bytes(raw)


def _zip_huge_directory() -> bytes:
    raw = bytearray(_zip(["archive/data.pkl"]))
    end = raw.rfind(b"PK\x05\x06")
    raw[end + 8:end + 12] = struct.pack("<HH", 0xFFFF, 0xFFFF)
    raw[end + 12:end + 16] = struct.pack("<I", 0xFFFFFFF0)
    return bytes(raw)


def zip_cases() -> list:
    verbs = ("load", "inspect", "run", "view", "export")
    return [
        ("zip_version_6_4", _zip(["archive/data.pkl"], extract_version=64), "reject", verbs),
        ("zip_version_6_4_torchscript", _zip(["archive/code/x.py", "archive/constants.pkl"], extract_version=64),
         "reject", verbs),
        ("zip_name_not_utf8", _zip_bad_name(), "reject", verbs),
        ("zip_huge_directory", _zip_huge_directory(), "reject", verbs),
        ("zip_truncated", _zip(["archive/data.pkl"])[:40], "reject", verbs),
        ("zip_encrypted_flag", _zip(["archive/data.pkl"], flag_bits=0x41), "reject", verbs),
        ("zip_torchscript", _zip(["archive/code/x.py", "archive/constants.pkl"]), "reject", verbs),
    ]


def all_cases() -> list:
    tools, chain = tools_base()
    return string_cases(tools) + structure_cases(tools, chain) + method_name_cases(tools) + zip_cases() + \
        export_cases(tools)

