"""The hostile-file catalogue: edits of real saved files (CRC recomputed), one or more per point of
issue 8 items 1, 2, 3 and the schema gaps. Each case says what must happen:

    reject   load raises LoadError (quickly, within the child's memory limit)
    same     the file loads and the program computes what the unedited one did (names are data)

and, for every case, the canary file must never appear and the child must never die.
"""
from __future__ import annotations

import json
import struct

import torch

from security_testlib import (dotless_payload, fix_crc, graphs, injections, module, node, parse, assemble,
                              rewrite, split)


def base_of(name: str) -> str:
    """The base a case edits ("fn" or "net": conftest.make_bases), whose inputs call it."""
    return "fn" if name.startswith(("inject_keyword", "inject_call_target", "inject_argument", "argument_named",
                                    "keyword_", "call_target", "namedtuple", "refused_op", "nodes_", "values_",
                                    "tensors_", "keywords", "ledger_", "extra_files", "nesting", "string_", "zeros",
                                    "arange", "repeat", "header", "sparse", "misaligned")) else "net"


def _edit(raw, fn=None, edit_tensors=None):
    return rewrite(raw, edit_doc=fn, edit_tensors=edit_tensors)


def _rename_method(doc, path, old, new):
    m = module(doc, path)
    m["methods"] = [[new if n == old else n, i] for n, i in m["methods"]]
    for n in (x for g in graphs(doc) for x in g["nodes"]):
        if n["op"] == "tracejit::call_module" and n["attrs"]["path"] == path.rsplit(".", 1)[-1] \
                and n["attrs"]["method"] == old:
            n["attrs"]["method"] = new


def _rename_child(doc, parent, old, new):
    """Rename a submodule everywhere: the parent's children, module paths, tensor-free call paths."""
    prefix = f"{parent}.{old}" if parent else old
    module(doc, parent)["children"] = [[new if n == old else n, p] for n, p in module(doc, parent)["children"]]
    gidx = dict(module(doc, parent)["methods"])["forward"]
    for n in graphs(doc)[gidx]["nodes"]:
        if n["op"] == "tracejit::call_module" and n["attrs"]["path"] == old:
            n["attrs"]["path"] = new
    return prefix


def _replace_node(doc, op_prefix, op, target, args, kwargs=(), outputs=None):
    n = node(doc, op_prefix)
    n["op"], n["target"], n["args"], n["kwargs"] = op, target, args, [list(p) for p in kwargs]
    if outputs is not None:
        n["outputs"] = outputs


def _f32(shape):
    return {"dtype": "float32", "shape": shape, "device": "cpu", "requires_grad": False}


def _many_nodes(doc, n, legit: bool):
    g = graphs(doc)[0]
    first = len(g["inputs"])
    out_type = g["nodes"][0]["outputs"][0]
    chain = [{"op": "aten::neg.default", "target": "method:neg", "args": [{"v": first + i - 1 if i else 0}],
              "kwargs": [], "outputs": [out_type], "dynamic": True} for i in range(n)]
    if legit:
        g["nodes"] = chain
        g["outputs"] = [{"v": first + n - 1}]
    else:
        g["nodes"] = g["nodes"] + chain


def code_cases(b, canary):
    """Item 1: nothing from a file reaches generated source."""
    net, fn = b["net"][1], b["fn"][1]
    cases = []
    for i, text in enumerate(injections(canary)):
        cases += [
            (f"inject_method_name_{i}", _edit(net, lambda d, t=text: _rename_method(d, "block", "forward", t)),
             "reject"),
            (f"inject_root_method_name_{i}", _edit(net, lambda d, t=text: module(d, "")["methods"][0].__setitem__(0, t)),
             "reject"),
            (f"inject_node_attribute_{i}",
             _edit(net, lambda d, t=text: node(d, "aten::relu").__setitem__("attrs", {"inplace": t})), "reject"),
            (f"inject_get_attr_path_{i}",
             _edit(net, lambda d, t=text: node(d, "tracejit::get_attr")["attrs"].__setitem__("path", t)), "reject"),
            (f"inject_keyword_name_{i}", _edit(fn, lambda d, t=text: node(d, "aten::add")["kwargs"][0].__setitem__(0, t)),
             "reject"),
            (f"inject_call_target_{i}", _edit(fn, lambda d, t=text: node(d, "aten::mul").__setitem__("target", "method:" + t)),
             "reject"),
            (f"inject_argument_name_{i}", _edit(fn, lambda d, t=text: _set_arg_names(d, t)), _data_name(text)),
            (f"inject_module_type_{i}", _edit(net, lambda d, t=text: module(d, "block").__setitem__("type", t)),
             _data_name(text)),
            (f"inject_ledger_and_source_{i}", _edit(net, lambda d, t=text: _set_texts(d, t)), _data_name(text)),
        ]
    dotless = f"a']; {dotless_payload(canary)}; x=['"
    cases += [
        ("inject_submodule_name", _edit(net, lambda d: _rename_child(d, "", "fc", dotless)), _data_name(dotless)),
        ("inject_submodule_name_short", _edit(net, lambda d: _rename_child(d, "", "fc", "a'];b=['")), "same"),
        ("inject_attribute_graph", _edit(net, lambda d: node(d, "tracejit::call_module")["attrs"].__setitem__(
            "graph", injections(canary)[0])), "reject"),
        ("inject_unpack_attribute", _edit(net, lambda d: node(d, "aten::relu").__setitem__("attrs", {"unpack": "x"})),
         "reject"),
    ]
    # names that would shadow what generated code reads, or take over a class attribute
    for name in ("train", "__call__", "__getattr__", "to", "_switch_mode", "state_dict", "ｆｏｒｗａｒｄ"):
        cases.append((f"method_named_{name}", _edit(net, lambda d, n=name: _rename_method(d, "block", "forward", n)),
                      "reject"))
    for name in ("ｔｏｒｃｈ", "torch", "Tensor", "slice", "self", "_tj_k0", "__class__", "isinstance", "float",
                 "_input_error"):
        cases.append((f"argument_named_{name}", _edit(fn, lambda d, n=name: _set_arg_names(d, n)), "same"))
        cases.append((f"parameter_named_{name}", _edit(net, lambda d, n=name: _rename_parameter(d, n)), "same"))
    cases.append(("submodule_named_nfkc_torch", _edit(net, lambda d: _rename_child(d, "", "fc", "ｔｏｒｃｈ")), "same"))
    cases.append(("keyword_nfkc", _edit(fn, lambda d: node(d, "aten::add")["kwargs"][0].__setitem__(0, "ａｌｐｈａ")),
                  "reject"))
    cases.append(("call_target_nfkc", _edit(fn, lambda d: node(d, "aten::add").__setitem__("target", "fn:torch.ａｄｄ")),
                  "reject"))
    cases.append(("namedtuple_nfkc", _edit(fn, lambda d: graphs(d)[0].__setitem__(
        "out_spec", {"kind": "namedtuple", "name": "Out", "fields": ["ｔｕｐｌｅ"], "children": [{"kind": "leaf"}]})),
        "reject"))
    for op, target, args in (
            ("aten::from_file.default", "fn:torch.from_file", ["/etc/passwd", True, 10]),
            ("aten::set_.source_Tensor", "method:set_", [{"v": 0}, {"v": 1}]),
            ("aten::as_strided.default", "method:as_strided", [{"v": 0}, [100000], [1]]),
            ("aten::_unsafe_view.default", "fn:torch._unsafe_view", [{"v": 0}, [4]]),
            ("aten::pin_memory.default", "method:pin_memory", [{"v": 0}]),
            ("aten::_sparse_coo_tensor_unsafe.default", "fn:torch._sparse_coo_tensor_unsafe",
             [{"v": 0}, {"v": 1}, [10 ** 6]]),
            ("aten::sparse_coo_tensor.indices_size", "fn:torch.sparse_coo_tensor", [{"v": 0}, {"v": 1}, [4]]),
            ("aten::to_sparse.default", "method:to_sparse", [{"v": 0}]),
            # what optimize_for_inference builds in memory only: never read from a file
            ("tracejit::kernel", "", [{"v": 0}]),
            ("mkldnn::_convolution_pointwise", "fn:torch.ops.mkldnn._convolution_pointwise",
             [{"v": 0}, {"v": 1}, None, [0, 0], [1, 1], [1, 1], 1, "none", [], ""]),
            ("mkldnn::_linear_pointwise", "fn:torch.ops.mkldnn._linear_pointwise",
             [{"v": 0}, {"v": 1}, None, "none", [], ""])):
        cases.append((f"refused_op_{op}", _edit(fn, lambda d, o=op, t=target, a=args: _replace_node(
            d, "aten::add", o, t, a)), "reject"))
    return cases


def _data_name(text: str) -> str:
    """Names are data: one the loader accepts (at most 200 characters) changes nothing else."""
    return "same" if len(text) <= 200 else "reject"


def _set_arg_names(doc, name):
    g = graphs(doc)[0]
    g["arg_names"] = [name] + g["arg_names"][1:]
    g["param_names"] = [name] + g["param_names"][1:]
    g["inputs"][0]["hint"] = name


def _set_texts(doc, text):
    for n in (x for g in graphs(doc) for x in g["nodes"]):
        n["source"] = [text, 1, text]
    doc["program"]["ledger"] = [{"kind": text, "message": text, "source": [text, 3, text], "value": text}]


def _rename_parameter(doc, name):
    m = module(doc, "fc")
    m["parameters"] = [[name if n == "weight" else n, p] for n, p in m["parameters"]]
    g = graphs(doc)[dict(m["methods"])["forward"]]
    for n in g["nodes"]:
        if n["op"] == "tracejit::get_attr" and n["attrs"]["path"] == "weight":
            n["attrs"]["path"] = name


def bound_cases(b):
    """Item 2: bounded loading."""
    net, fn = b["net"][1], b["fn"][1]

    def kwargs_300k(d):
        node(d, "aten::add")["kwargs"] = [[f"k{i}", i] for i in range(300_000)]

    def amplification(d):
        big = json.loads(json.dumps(graphs(d)[4]))
        big["nodes"] = big["nodes"] * 2000
        d["program"]["graphs"].append(big)
        idx = len(d["program"]["graphs"]) - 1
        d["program"]["modules"] += [{"path": f"m{i}", "type": "Dropout", "training": False, "parameters": [],
                                     "buffers": [], "non_persistent": [], "children": [],
                                     "methods": [["forward", idx]]} for i in range(2000)]

    def deep(d):
        graphs(d)[0]["nodes"][0]["args"].append("DEEP")

    def deep_text(text):
        return text.replace('"DEEP"', "[" * 100_000 + "0" + "]" * 100_000)

    return [
        ("nodes_60k", _edit(fn, lambda d: graphs(d)[0]["nodes"].extend([{"op": "aten::neg"}] * 60_000)), "reject"),
        ("values_600k", _edit(fn, lambda d: graphs(d)[0]["nodes"][0]["args"].append([0] * 600_000)), "reject"),
        ("tensors_150k", _many_tensors(fn, 150_000), "reject"),
        ("header_17MiB", _edit(fn, lambda d: d["program"].__setitem__("extra_files", {"big": "A" * (17 << 20)})),
         "reject"),
        ("nodes_20k_legit", _edit(fn, lambda d: _many_nodes(d, 20_000, legit=True)), "loaded"),
        ("keywords_300k", _edit(fn, kwargs_300k), "reject"),
        ("amplification_2000x2000", _edit(net, amplification), "reject"),
        ("ledger_200k", _edit(fn, lambda d: d["program"].__setitem__(
            "ledger", [{"kind": "k", "message": "m", "source": None, "value": None}] * 200_000)), "reject"),
        ("extra_files_20k", _edit(fn, lambda d: d["program"].__setitem__(
            "extra_files", {f"f{i}": "" for i in range(20_000)})), "reject"),
        ("select_dim_1e7", _edit(net, lambda d: node(d, "aten::slice")["args"].__setitem__(1, 10 ** 7)), "reject"),
        ("nesting_100k", rewrite(fn, edit_doc=deep, edit_text=deep_text), "reject"),
        ("string_1MB", _edit(fn, lambda d: graphs(d)[0].__setitem__("name", "g" * 1_000_000)), "reject"),
        ("zeros_1e12", _edit(fn, lambda d: _replace_node(d, "aten::add", "aten::zeros.default", "fn:torch.zeros",
                                                         [[10 ** 6, 10 ** 6]])), "reject"),
        ("arange_1e12", _edit(fn, lambda d: _replace_node(d, "aten::add", "aten::arange.default", "fn:torch.arange",
                                                          [10 ** 12])), "reject"),
        ("repeat_1e5x1e5", _edit(fn, lambda d: _replace_node(d, "aten::add", "aten::repeat.default", "method:repeat",
                                                             [{"v": 0}, [100_000, 100_000]])), "reject"),
        ("pad_1e9", _edit(fn, lambda d: _replace_node(d, "aten::add", "aten::constant_pad_nd.default",
                                                      "fn:torch.constant_pad_nd", [{"v": 0}, [10 ** 9, 0]])), "reject"),
        ("upsample_scale_1e8", _edit(fn, lambda d: _replace_node(
            d, "aten::add", "aten::upsample_nearest1d.vec", "fn:torch._C._nn.upsample_nearest1d",
            [{"v": 0}, None, [1e8]])), "reject"),
        ("header_length_lies", _header_length(fn, 2 ** 40), "reject"),
        ("header_values_2M", _header_junk(fn, 2_000_000), "reject"),
    ]


def _many_tensors(raw, n):
    """The file with n empty tensors added to its safetensors header."""
    header, data = split(raw)
    header.update({f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(n)})
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return fix_crc(struct.pack("<Q", len(text)) + text + data)


def _header_junk(raw, n):
    """n small values in the safetensors metadata, beside the program document."""
    header, data = split(raw)
    header["__metadata__"]["junk"] = [0] * n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return fix_crc(struct.pack("<Q", len(text)) + text + data)


def _header_length(raw, n):
    return fix_crc(struct.pack("<Q", n) + raw[8:])


def crash_and_schema_cases(b):
    """Item 3 (no crash) and the schema gaps: the file must not load."""
    net, fn = b["net"][1], b["fn"][1]
    return [
        ("sparse_layout_constant", _edit(fn, lambda d: _replace_node(
            d, "aten::add", "aten::zeros.default", "fn:torch.zeros", [[4]], [["layout", {"layout": "sparse_coo"}]])),
         "reject"),
        ("linear_weight_true", _edit(net, lambda d: node(d, "aten::linear")["args"].__setitem__(1, True)), "reject"),
        ("linear_weight_2_63", _edit(net, lambda d: node(d, "aten::linear")["args"].__setitem__(1, 2 ** 63)), "reject"),
        ("dropout_p_7", _edit(net, lambda d: node(d, "aten::dropout")["args"].__setitem__(1, 7.0)), "reject"),
        ("dropout_string_input", _edit(net, lambda d: node(d, "aten::dropout")["args"].__setitem__(0, "x")), "reject"),
        ("dropout_without_overload", _edit(net, lambda d: node(d, "aten::dropout").update(
            op="aten::dropout", args=["x", 0.2, False])), "reject"),
        ("batch_norm_null_running_mean", _edit(net, lambda d: node(d, "aten::batch_norm")["args"].__setitem__(3, None)),
         "reject"),
        ("view_impossible_shape", _edit(net, lambda d: node(d, "aten::view")["args"].__setitem__(1, [7, 5])), "reject"),
        ("view_two_minus_ones", _edit(net, lambda d: node(d, "aten::view")["args"].__setitem__(1, [-1, -1])), "reject"),
        ("view_negative_size", _edit(net, lambda d: node(d, "aten::view")["args"].__setitem__(1, [-4])), "reject"),
        ("int_beyond_64_bits", _edit(net, lambda d: node(d, "aten::gt")["args"].__setitem__(1, 2 ** 70)), "reject"),
        ("misaligned_weights", misaligned(fn), "same"),
    ]


def misaligned(raw):
    """The same tensors, each starting one byte later in the file (a 1-byte tensor first)."""
    doc, tensors = parse(raw)
    tensors = dict(tensors)
    tensors["__pad__"] = torch.zeros(1, dtype=torch.uint8)
    good = assemble(doc, tensors)
    header, data = split(good)
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    order = sorted(entries, key=lambda k: entries[k]["data_offsets"][0])
    chunks = {k: data[entries[k]["data_offsets"][0]:entries[k]["data_offsets"][1]] for k in order}
    new_order = ["__pad__"] + [k for k in order if k != "__pad__"]
    out, at = b"", 0
    for k in new_order:
        entries[k]["data_offsets"] = [at, at + len(chunks[k])]
        out += chunks[k]
        at += len(chunks[k])
    entries["__metadata__"] = header["__metadata__"]
    text = json.dumps(entries).encode()
    text += b" " * (-len(text) % 8)
    return fix_crc(struct.pack("<Q", len(text)) + text + out)
