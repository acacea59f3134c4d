"""tracejit.load on bad input: every problem is a tracejit.LoadError (never another exception)
whose message says what is wrong, and no code from the file ever runs.

Edits of the program document are re-serialized with a recomputed CRC (``rewrite``), so they
reach the validation layer instead of stopping at the checksum.
"""
import io
import json
import random
import struct
import zlib

import pytest
import torch
from torch import nn

import tracejit
from tracejit.serialize import SCHEMA_VERSION
from serialize_testlib import (assemble, doc_text, expect_load_error, first_node, fix_crc, graphs, load_bytes,
                               method_graph, parse, raw_file, rewrite, split, to_bytes)


def header_end(raw):
    return 8 + struct.unpack("<Q", raw[:8])[0]


def node_by_op(doc, prefix):
    return first_node(doc, lambda n: n["op"].startswith(prefix))


# ---------------------------------------------------------------------------------------------
# the container: empty, truncated, random, not safetensors, lying lengths and offsets
# ---------------------------------------------------------------------------------------------

def test_empty_file(tmp_path):
    p = tmp_path / "empty.tj"
    p.write_bytes(b"")
    with pytest.raises(tracejit.LoadError, match="empty"):
        tracejit.load(p)
    expect_load_error(b"", "0 bytes")


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(tracejit.LoadError, match="no such file"):
        tracejit.load(tmp_path / "nope.tj")
    with pytest.raises(tracejit.LoadError, match="directory"):
        tracejit.load(tmp_path)


def test_text_mode_file_object(small_net, tmp_path):
    p = tmp_path / "m.tj"
    p.write_bytes(small_net[2])
    with open(p, "r", encoding="latin-1") as f:
        with pytest.raises(tracejit.LoadError, match="binary"):
            tracejit.load(f)


@pytest.mark.parametrize("which", ["net", "fn"])
def test_truncated(small_net, small_fn, which, tmp_path):
    raw = small_net[2] if which == "net" else small_fn[1]
    end = header_end(raw)
    cuts = sorted({1, 4, 7, 8, 9, 16, end // 2, end - 1, end, end + 1, (end + len(raw)) // 2, len(raw) - 1})
    for cut in cuts:
        msg = expect_load_error(raw[:cut])
        assert any(w in msg for w in ("too short", "claims", "truncated", "checksum", "damaged")), (cut, msg)
        # without the checksum the loader still finds the missing data
        msg = expect_load_error(raw[:cut], check_integrity=False)
        if cut > end:
            assert "outside" in msg or "does not fit" in msg, (cut, msg)
    p = tmp_path / "cut.tj"
    p.write_bytes(raw[:end + 3])
    with pytest.raises(tracejit.LoadError):
        tracejit.load(p)


def test_random_bytes():
    rng = random.Random(1234)
    for size in (1, 7, 8, 9, 64, 1000, 5000):
        expect_load_error(bytes(rng.randrange(256) for _ in range(size)))
    # a plausible small length followed by garbage
    expect_load_error(struct.pack("<Q", 16) + bytes(rng.randrange(256) for _ in range(40)), "not valid JSON")
    # invalid UTF-8 in the header
    expect_load_error(struct.pack("<Q", 8) + b"\xff\xfe\xfd{}   " + b"\0" * 8)


def test_other_file_formats(tmp_path):
    """A torch.save zip, a text file and a plain safetensors file are not tracejit programs."""
    torch.save(nn.Linear(2, 2).state_dict(), tmp_path / "sd.pt")
    expect_load_error((tmp_path / "sd.pt").read_bytes())
    expect_load_error(b"hello, this is a text file, not a program\n" * 3)
    expect_load_error(b"\x7fELF" + b"\0" * 60)
    from safetensors.torch import save as st_save
    plain = st_save({"w": torch.ones(2)})
    expect_load_error(plain, "tracejit")
    expect_load_error(st_save({"w": torch.ones(2)}, metadata={"other": "x"}), "tracejit")
    expect_load_error(st_save({"w": torch.ones(2)}, metadata={"tracejit": "{not json"}), "not valid JSON")
    expect_load_error(st_save({"w": torch.ones(2)}, metadata={"tracejit": "[1, 2]"}), "format")
    expect_load_error(struct.pack("<Q", 8) + b"[1,2]   ", "tracejit")


def test_header_length_too_big(small_net):
    raw = small_net[2]
    body = raw[8:]
    for n in (len(body) + 1, len(body) * 2, 2 ** 40, 2 ** 63, 2 ** 64 - 1):
        expect_load_error(struct.pack("<Q", n) + body, "claims", str(n))


def test_header_length_too_small(small_net):
    raw = small_net[2]
    n = header_end(raw) - 8
    for m in (0, 2, n // 2, n - 9, n - 1):
        msg = expect_load_error(struct.pack("<Q", m) + raw[8:])
        # a JSON prefix, or (cutting only padding) a header that parses but shifts the data
        assert "JSON" in msg or "tracejit" in msg or "checksum" in msg, (m, msg)


def _tensor_header(raw):
    header, data = split(raw)
    return header, data


def test_data_offsets_beyond_the_file(small_net):
    header, data = _tensor_header(small_net[2])
    info = header["conv.weight"]
    size = info["data_offsets"][1] - info["data_offsets"][0]
    info["data_offsets"] = [len(data) - size + 4, len(data) + 4]
    expect_load_error(raw_file(header, data), "conv.weight", "outside")
    info["data_offsets"] = [2 ** 62, 2 ** 62 + size]
    expect_load_error(raw_file(header, data), "conv.weight")
    info["data_offsets"] = [-size, 0]
    expect_load_error(raw_file(header, data), "conv.weight")


def test_data_offsets_overlap(small_net):
    header, data = _tensor_header(small_net[2])
    a, b = header["bn.running_mean"], header["bn.running_var"]
    assert a["shape"] == b["shape"] and a["dtype"] == b["dtype"]
    b["data_offsets"] = list(a["data_offsets"])
    expect_load_error(raw_file(header, data), "overlap")
    expect_load_error(raw_file(header, data, crc=False), "overlap", check_integrity=False)


def test_data_size_does_not_match_shape_and_dtype(small_net):
    for edit in (lambda i: i.update(shape=[i["shape"][0] + 1] + i["shape"][1:]),
                 lambda i: i.update(dtype="F64"),
                 lambda i: i.update(data_offsets=[i["data_offsets"][0], i["data_offsets"][1] - 4]),
                 lambda i: i.update(shape=[-1])):
        header, data = _tensor_header(small_net[2])
        edit(header["conv.weight"])
        expect_load_error(raw_file(header, data), "conv.weight")


def test_malformed_tensor_entries(small_net):
    for bad in ({"dtype": "F32"}, "x", {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]},
                {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]},
                {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1},
                {"dtype": "F32", "shape": [1], "data_offsets": ["0", "4"]}):
        header, data = _tensor_header(small_net[2])
        header["zzz"] = bad
        expect_load_error(raw_file(header, data), "zzz")


# ---------------------------------------------------------------------------------------------
# the document: version, format, checksum, duplicates, nesting, size
# ---------------------------------------------------------------------------------------------

def test_newer_schema_version(small_net):
    raw = rewrite(small_net[2], edit_doc=lambda d: d.update(schema_version=SCHEMA_VERSION + 1))
    msg = expect_load_error(raw, "newer", "upgrade")
    assert f"version {SCHEMA_VERSION + 1}" in msg and f"version {SCHEMA_VERSION}" in msg


@pytest.mark.parametrize("version", [0, -1, "1", True, None, 1.5])
def test_bad_schema_version(small_net, version):
    raw = rewrite(small_net[2], edit_doc=lambda d: d.update(schema_version=version))
    expect_load_error(raw, "schema version")


@pytest.mark.parametrize("marker", ["torchscript", "", None, "TRACEJIT"])
def test_wrong_format_marker(small_net, marker):
    expect_load_error(rewrite(small_net[2], edit_doc=lambda d: d.update(format=marker)), "format")


def test_missing_format_marker(small_net):
    expect_load_error(rewrite(small_net[2], edit_doc=lambda d: d.pop("format")), "format")


def test_checksum_field_problems(small_net):
    doc, tensors = parse(small_net[2])
    from safetensors.torch import save as st_save
    for crc in (None, 123, "abc", "zzzzzzzz"):
        d = dict(doc, crc32=crc)
        raw = st_save(tensors, metadata={"tracejit": json.dumps(d, sort_keys=True, separators=(",", ":"))})
        expect_load_error(raw, "checksum")
    d = dict(doc)
    d.pop("crc32")
    expect_load_error(st_save(tensors, metadata={"tracejit": json.dumps(d)}), "checksum")
    # a valid document with a wrong checksum
    bad = bytearray(small_net[2])
    at = bad.find(b'crc32\\":\\"') + len(b'crc32\\":\\"')
    bad[at:at + 8] = b"deadbeef" if bytes(bad[at:at + 8]) != b"deadbeef" else b"00000001"
    expect_load_error(bytes(bad), "checksum mismatch")
    assert isinstance(load_bytes(bytes(bad), check_integrity=False), tracejit.TracedModule)


def test_duplicate_json_keys(small_net):
    doc, tensors = parse(small_net[2])
    text = doc_text(doc)
    assert text.count('"format":"tracejit"') == 1
    expect_load_error(assemble(text.replace('"format":"tracejit"', '"format":"tracejit","format":"tracejit"'),
                               tensors), "twice")
    # a duplicated tensor name in the safetensors header
    raw = small_net[2]
    end = header_end(raw)
    head = raw[8:end].decode()
    entry = '"conv.bias":' + json.dumps(split(raw)[0]["conv.bias"], separators=(",", ":"))
    assert entry in head
    head2 = head.rstrip().replace(entry, entry + "," + entry, 1).encode()
    head2 += b" " * (-len(head2) % 8)
    expect_load_error(fix_crc(struct.pack("<Q", len(head2)) + head2 + raw[end:]), "twice")


def test_duplicate_parameter_names(small_net):
    def edit(doc):
        conv = next(m for m in doc["program"]["modules"] if m["path"] == "conv")
        conv["parameters"].append(list(conv["parameters"][0]))
    expect_load_error(rewrite(small_net[2], edit_doc=edit), "twice")


def test_duplicate_module_paths(small_net):
    def edit(doc):
        mods = doc["program"]["modules"]
        mods.append(json.loads(json.dumps(mods[1])))
    expect_load_error(rewrite(small_net[2], edit_doc=edit), "twice")


def test_missing_tensors(small_net, small_fn):
    for key in ("conv.weight", "bn.running_var", "fc.bias"):
        raw = rewrite(small_net[2], edit_tensors=lambda t: t.pop(key))
        expect_load_error(raw, key, "does not hold")
    raw = rewrite(small_fn[1], edit_tensors=lambda t: t.clear())
    expect_load_error(raw, "does not hold")


def test_weight_shape_differs_from_graph(small_net):
    def edit(t):
        t["conv.weight"] = torch.zeros(3, 2, 3, 4)
    msg = expect_load_error(rewrite(small_net[2], edit_tensors=edit), "weight")
    assert "[3, 2, 3, 4]" in msg and "[3, 2, 3, 3]" in msg


def test_weight_dtype_differs_from_graph(small_net):
    def edit(t):
        t["fc.weight"] = t["fc.weight"].double()
    expect_load_error(rewrite(small_net[2], edit_tensors=edit), "float64", "float32")

    def edit_buffer(t):
        t["bn.running_mean"] = t["bn.running_mean"].half()
    expect_load_error(rewrite(small_net[2], edit_tensors=edit_buffer), "running_mean", "float16")


def test_constant_shape_differs_from_graph(small_fn):
    def edit(t):
        (k,) = t
        t[k] = torch.zeros(5)
    expect_load_error(rewrite(small_fn[1], edit_tensors=edit), "[5]", "[4]")


def test_deeply_nested_argument(small_fn):
    doc, tensors = parse(small_fn[1])
    node_by_op(doc, "aten::mul")["args"][1] = "__DEEP__"
    n = 100_000
    text = doc_text(doc).replace('"__DEEP__"', "[" * n + "]" * n)
    expect_load_error(assemble(text, tensors), "nest")


def test_deeply_nested_header_and_constant(small_fn):
    raw = small_fn[1]
    header, data = split(raw)
    (k,) = [k for k in header if k != "__metadata__"]
    head = json.dumps(header).replace('"shape": [4]', '"shape": ' + "[" * 50_000 + "]" * 50_000)
    head = head.encode() + b" " * (-len(head) % 8)
    expect_load_error(struct.pack("<Q", len(head)) + head + data)
    # nesting through the constant tags: {"tuple": [{"tuple": [...]}]}
    doc, tensors = parse(raw)
    node_by_op(doc, "aten::mul")["args"][1] = "__DEEP__"
    text = doc_text(doc).replace('"__DEEP__"', '{"tuple":[' * 5000 + "1" + "]}" * 5000)
    expect_load_error(assemble(text, tensors), "nest")


def test_huge_documents(small_fn):
    # a 300,000-element argument list: rejected by the schema, in bounded time
    raw = rewrite(small_fn[1], edit_doc=lambda d: node_by_op(d, "aten::mul").update(args=[1] * 300_000))
    expect_load_error(raw, "schema")
    # a 5 MB name
    raw = rewrite(small_fn[1], edit_doc=lambda d: graphs(d)[0].update(name="g" * 5_000_000))
    expect_load_error(raw, "name")
    # 20,000 nodes that do not fit their ops
    raw = rewrite(small_fn[1], edit_doc=lambda d: graphs(d)[0]["nodes"].extend(
        [{"op": "aten::relu.default", "target": "method:relu", "args": [], "kwargs": {}, "outputs": []}] * 20_000))
    expect_load_error(raw)


def test_flipped_byte_anywhere_small_file(small_fn):
    raw = small_fn[1]
    for i in range(len(raw)):
        for mask in (0x01, 0x80):
            bad = bytearray(raw)
            bad[i] ^= mask
            with pytest.raises(tracejit.LoadError):
                load_bytes(bytes(bad))


def test_flipped_byte_anywhere_module_file(small_net):
    raw = small_net[2]
    end = header_end(raw)
    positions = list(range(0, end, 5)) + list(range(end, len(raw)))   # and every weight byte
    for i in positions:
        bad = bytearray(raw)
        bad[i] ^= 0x10
        with pytest.raises(tracejit.LoadError):
            load_bytes(bytes(bad))


def test_flipped_weight_byte_loads_without_integrity_check(small_net):
    """check_integrity=False skips the CRC (and only the CRC): the damaged weight is used as is."""
    net, traced, raw = small_net
    header, _ = split(raw)
    begin = header_end(raw) + header["fc.weight"]["data_offsets"][0]
    bad = bytearray(raw)
    bad[begin + 3] ^= 0x40               # the exponent byte of fc.weight[0, 0]
    expect_load_error(bytes(bad), "checksum")
    loaded = load_bytes(bytes(bad), check_integrity=False)
    assert not torch.equal(loaded.fc.weight, net.fc.weight)
    assert torch.equal(loaded.conv.weight, net.conv.weight)


# ---------------------------------------------------------------------------------------------
# ops and call targets
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op,needle", [("aten::definitely_not_an_op", "definitely_not_an_op"),
                                       ("aten::definitely_not_an_op.default", "definitely_not_an_op"),
                                       ("aten::add.NoSuchOverload", "NoSuchOverload"),
                                       ("os::system", "namespace"), ("prim::Print", "namespace"),
                                       ("builtins::eval", "namespace"), ("tracejit::exec", ""),
                                       ("aten::add.Tensor; import os", "op name"), ("", ""), ("add", "")])
def test_unknown_or_disallowed_ops(small_fn, op, needle):
    raw = rewrite(small_fn[1], edit_doc=lambda d: node_by_op(d, "aten::add").update(op=op))
    expect_load_error(raw, needle)


@pytest.mark.parametrize("target", ["fn:os.system", "fn:torch.load", "fn:torch.save", "method:__class__",
                                    "method:data_ptr", "method:untyped_storage", "method:set_",
                                    "fn:torch._C._VariableFunctions.from_file", "fn:torch.from_file",
                                    "fn:builtins.eval", "fn:eval", "fn:torch.hub.load", "fn:torch.set_num_threads",
                                    "fn:torch.manual_seed", "attr:__dict__", "attr:_cdata", "index:eval",
                                    "op:__import__", "op:", "weird:thing", "", "method:relu(); import os; x.relu",
                                    "fn:torch.add(x); __import__('os'); torch.add"])
def test_call_target_outside_allowlist(small_fn, target):
    raw = rewrite(small_fn[1], edit_doc=lambda d: node_by_op(d, "aten::add").update(target=target))
    msg = expect_load_error(raw)
    assert target.partition(":")[2][:20] in msg or "call target" in msg, msg


@pytest.mark.parametrize("target,args", [
    pytest.param("fn:torch.set_anomaly_enabled", [True]),
    pytest.param("fn:torch.set_num_interop_threads", [3]),
    pytest.param("fn:torch.set_autocast_enabled", [True]),
    pytest.param("fn:torch.set_flush_denormal", [True]),
    pytest.param("method:__setattr__", [{"v": 0}, "requires_grad", True]),
    pytest.param("method:__getattribute__", [{"v": 0}, "untyped_storage"]),
])
def test_non_tensor_builtins_are_not_call_targets(small_fn, target, args):
    """Builtins reachable through the allowed namespaces that are not tensor operations."""
    def edit(doc):
        node = node_by_op(doc, "aten::add")
        node.update(op="aten::add", target=target, args=args, kwargs=[])
    expect_load_error(rewrite(small_fn[1], edit_doc=edit))


@pytest.mark.parametrize("op,target,args", [
    ("aten::from_file", "fn:torch.from_file", ["/etc/hostname", False, 4]),
    ("aten::from_file", "fn:torch._C._VariableFunctions.from_file", ["/etc/hostname", False, 4]),
    ("aten::set_", "method:set_", [{"v": 0}, {"v": 1}]),
    ("aten::_assert_async", "fn:torch._assert_async", [{"v": 0}]),
])
def test_denied_builtins_even_when_the_op_matches(small_fn, op, target, args):
    """The deny list holds when the op and its target agree (aten::from_file reads a file)."""
    def edit(doc):
        node_by_op(doc, "aten::add").update(op=op, target=target, args=args, kwargs=[])
    msg = expect_load_error(rewrite(small_fn[1], edit_doc=edit))
    assert target.rpartition(".")[2].rpartition(":")[2] in msg, msg


def test_call_target_must_match_op(small_fn):
    """The graph says what runs: a target that does not carry out the node's op is refused."""
    raw = rewrite(small_fn[1], edit_doc=lambda d: node_by_op(d, "aten::add").update(target="fn:torch.sub"))
    expect_load_error(raw, "torch.sub")


@pytest.mark.parametrize("args", [["just a string"], [{"v": 0}], [{"v": 0}, "x"], []])
def test_arguments_that_do_not_fit_the_schema(small_net, args):
    raw = rewrite(small_net[2], edit_doc=lambda d: node_by_op(d, "aten::conv2d").update(args=args))
    expect_load_error(raw, "conv2d")


@pytest.mark.parametrize("kwargs", [{"no_such_kw": 1}, {"padding_mode": 1}, {"stride": "x"}, {"groups": [1.5]}])
def test_keyword_arguments_that_do_not_fit_the_schema(small_net, kwargs):
    def edit(doc):
        node_by_op(doc, "aten::conv2d")["kwargs"].extend([k, v] for k, v in kwargs.items())
    expect_load_error(rewrite(small_net[2], edit_doc=edit), "conv2d")


@pytest.mark.parametrize("ref", [{"v": 999}, {"v": -1}, {"v": "0"}, {"v": True}, {"v": 0, "w": 1}])
def test_bad_value_references(small_fn, ref):
    raw = rewrite(small_fn[1], edit_doc=lambda d: node_by_op(d, "aten::mul").update(args=[ref, 3]))
    expect_load_error(raw)


def test_use_before_definition(small_fn):
    def edit(doc):
        nodes = graphs(doc)[0]["nodes"]
        nodes.reverse()
    expect_load_error(rewrite(small_fn[1], edit_doc=edit))


@pytest.mark.parametrize("const", [{"float": "__import__('os')"}, {"dtype": "object"}, {"device": "cpu'); x"},
                                   {"layout": "x"}, {"eval": "1"}, {"slice": [1]}, {"complex": ["a", 1]},
                                   {"a": 1, "b": 2}])
def test_bad_tagged_constants(small_fn, const):
    raw = rewrite(small_fn[1], edit_doc=lambda d: node_by_op(d, "aten::mul").update(args=[{"v": 2}, const]))
    expect_load_error(raw)


@pytest.mark.parametrize("edit", [
    lambda d: d["program"].update(kind="pickle"),
    lambda d: d["program"].update(modules=[]),
    lambda d: d["program"].update(modules={"": 1}),
    lambda d: d.update(program=[]),
    lambda d: d.pop("program"),
    lambda d: d["program"]["modules"][0].update(path="not-root"),
    lambda d: d["program"]["modules"][0].update(children=[["conv", "no.such.module"]]),
    lambda d: d["program"]["modules"][0].update(type=""),
    lambda d: d["program"]["modules"][0].update(type=7),
    lambda d: d["program"]["modules"][0].update(parameters={"a": 1}),
    lambda d: d["program"]["modules"][1].update(parameters=[["weight", "conv.weight"]]),
    lambda d: d["program"]["modules"][1].update(parameters=[["a.b", None]]),
    lambda d: d["program"].update(ledger={"x": 1}),
    lambda d: d["program"].update(ledger=[{"kind": 1}]),
], ids=["kind", "no-modules", "modules-dict", "program-list", "no-program", "no-root", "unknown-child", "empty-type",
        "int-type", "params-dict", "param-not-dict", "dotted-name", "ledger-dict", "ledger-entry"])
def test_malformed_program_structure(small_net, edit):
    expect_load_error(rewrite(small_net[2], edit_doc=edit))


def test_get_attr_of_missing_parameter(small_net):
    def edit(doc):
        conv = next(m for m in doc["program"]["modules"] if m["path"] == "conv")
        conv["parameters"] = [p for p in conv["parameters"] if p[0] != "weight"]
    expect_load_error(rewrite(small_net[2], edit_doc=edit), "weight")


def test_call_of_undefined_method(small_net):
    def edit(doc):
        node_by_op(doc, "tracejit::call_module")["attrs"]["method"] = "forward_7"
    expect_load_error(rewrite(small_net[2], edit_doc=edit), "forward_7")


def test_malformed_ledger_source(small_net):
    def edit(doc):
        doc["program"]["ledger"] = [{"kind": "size", "message": "m", "source": ["f.py", "twelve", "g"], "value": 1}]
    expect_load_error(rewrite(small_net[2], edit_doc=edit), "ledger")


def test_malformed_extra_file_content(small_net):
    raw = rewrite(small_net[2], edit_doc=lambda d: d["program"].update(extra_files={"a.txt": "%%%not base64"}))
    expect_load_error(raw, "a.txt", extra_files={"a.txt": ""})


def test_malformed_extra_files_table(small_net):
    raw = rewrite(small_net[2], edit_doc=lambda d: d["program"].update(extra_files=5))
    expect_load_error(raw, "extra", extra_files={"a.txt": ""})


# ---------------------------------------------------------------------------------------------
# code injection through names that reach generated code: LoadError, and nothing runs
# ---------------------------------------------------------------------------------------------

class KwNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, scale):
        return self.lin(x) * scale


@pytest.fixture(scope="module")
def kw_net():
    torch.manual_seed(5)
    traced = tracejit.trace(KwNet(), example_kwarg_inputs={"x": torch.randn(2, 3), "scale": torch.randn(2, 3)})
    return traced, to_bytes(traced)


def assert_rejected_without_running(raw, marker, call):
    """The file must not load; if it does, calling it must still not run the injected code."""
    try:
        obj = load_bytes(raw)
    except tracejit.LoadError:
        assert not marker.exists()
        return
    try:
        call(obj)
    except Exception:
        pass
    assert not marker.exists(), "code from the file ran"
    pytest.fail("a file with code in a name loaded without a LoadError")


def payload(marker):
    return f"open({str(marker)!r}, 'w')"


def test_injection_through_keyword_argument_name(kw_net, tmp_path):
    marker = tmp_path / "pwned"

    def edit(doc):
        root = next(g for g in graphs(doc) if g["in_spec"]["children"][1]["keys"])
        keys = root["in_spec"]["children"][1]["keys"]
        keys[keys.index("scale")] = f"x=1): {payload(marker)} #"
    call = lambda m: m(x=torch.randn(2, 3), scale=torch.randn(2, 3))  # noqa: E731
    assert_rejected_without_running(rewrite(kw_net[1], edit_doc=edit), marker, call)
    msg = expect_load_error(rewrite(kw_net[1], edit_doc=edit), "identifier")
    assert "keyword" in msg


def test_injection_through_method_name(kw_net, tmp_path):
    marker = tmp_path / "pwned"

    def edit(doc):
        doc["program"]["modules"][0]["methods"][0][0] = f"forward(self):\n  {payload(marker)}\n  def f"
    assert_rejected_without_running(rewrite(kw_net[1], edit_doc=edit), marker,
                                    lambda m: m(x=torch.randn(2, 3), scale=torch.randn(2, 3)))
    expect_load_error(rewrite(kw_net[1], edit_doc=edit), "identifier")


def test_injection_through_called_method_name(small_net, tmp_path):
    marker = tmp_path / "pwned"

    def edit(doc):
        node_by_op(doc, "tracejit::call_module")["attrs"]["method"] = f"forward(x); {payload(marker)}; f"
    assert_rejected_without_running(rewrite(small_net[2], edit_doc=edit), marker, lambda m: m(torch.randn(1, 2, 4, 4)))


def test_injection_through_node_keyword_name(small_fn, tmp_path):
    """A keyword argument name of a node whose op names its overload is checked against the schema."""
    marker = tmp_path / "pwned"

    def edit(doc):
        node_by_op(doc, "aten::add")["kwargs"] = [[f"alpha=2); {payload(marker)} #", 1]]
    assert_rejected_without_running(rewrite(small_fn[1], edit_doc=edit), marker,
                                    lambda f: f(torch.randn(4), torch.randn(4)))


def test_injection_through_node_keyword_name_without_overload(small_fn, tmp_path):
    """Without an overload no schema checks the keyword names: they must still be identifiers
    (codegen writes them as ``name=value``)."""
    marker = tmp_path / "pwned"

    def edit(doc):
        node = node_by_op(doc, "aten::add")
        node["op"] = "aten::add"
        node["kwargs"] = [[f"alpha=2); {payload(marker)} #", 1]]
    assert_rejected_without_running(rewrite(small_fn[1], edit_doc=edit), marker,
                                    lambda f: f(torch.randn(4), torch.randn(4)))


@pytest.mark.parametrize("field", ["hint", "arg_name", "param_name", "graph_name", "module_type", "source",
                                   "function_name"])
def test_injection_through_descriptive_names(small_net, small_fn, tmp_path, field):
    """Names that only describe (hints, argument names, types, source files) never become code: the
    file either fails to load or loads and computes as before, and the payload never runs."""
    marker = tmp_path / "pwned"
    bad = f"a'); {payload(marker)} #\n\"\"\"'''"
    net, traced, raw = small_net
    x = torch.randn(3, 2, 4, 4)
    call = lambda m: m(x)  # noqa: E731

    def edit(doc):
        root = method_graph(doc, "", "forward")
        if field == "hint":
            root["inputs"][0]["hint"] = bad
        elif field == "arg_name":
            root["arg_names"][0] = bad
        elif field == "param_name":
            root["param_names"][0] = bad
        elif field == "graph_name":
            root["name"] = bad
        elif field == "module_type":
            doc["program"]["modules"][0]["type"] = bad
            root["module_type"] = bad
        elif field == "source":
            for g in graphs(doc):
                for n in g["nodes"]:
                    n["source"] = [bad, 1, bad]
        else:
            doc["program"]["name"] = bad
    if field == "function_name":
        traced, raw = small_fn
        args = (torch.randn(4), torch.randn(4))
        call = lambda f: f(*args)  # noqa: E731
    try:
        loaded = load_bytes(rewrite(raw, edit_doc=edit))
    except tracejit.LoadError:
        loaded = None
    if loaded is not None:
        with torch.no_grad():
            torch.testing.assert_close(call(loaded), call(traced))
        str(loaded.graph), loaded.code, repr(loaded)   # printing does not run anything either
    assert not marker.exists()


def test_injection_through_parameter_name_with_quotes(small_net, tmp_path):
    """A parameter name with quotes reaches the code only as a string literal (or is refused)."""
    marker = tmp_path / "pwned"
    bad = f"w']; {payload(marker)}; x=self._parameters['"

    def edit(doc):
        fc = next(m for m in doc["program"]["modules"] if m["path"] == "fc")
        for p in fc["parameters"]:
            if p[0] == "weight":
                p[0] = bad
        for g in graphs(doc):
            for n in g["nodes"]:
                if n["op"] == "tracejit::get_attr" and n["attrs"]["path"] == "weight" and g["module_type"] == "Linear":
                    n["attrs"]["path"] = bad
    net, traced, raw = small_net
    x = torch.randn(3, 2, 4, 4)
    try:
        loaded = load_bytes(rewrite(raw, edit_doc=edit))
    except tracejit.LoadError:
        loaded = None
    if loaded is not None:
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), net(x))
    assert not marker.exists()


@pytest.mark.parametrize("where", ["name", "fields"])
def test_injection_through_namedtuple_description(tmp_path, where):
    import collections
    P = collections.namedtuple("P", ["a", "b"])
    traced = tracejit.trace(lambda x: P(x + 1, x * 2), torch.randn(3))
    marker = tmp_path / "pwned"

    def edit(doc):
        spec = graphs(doc)[0]["out_spec"]
        assert spec["kind"] == "namedtuple"
        if where == "name":
            spec["name"] = f"P', {payload(marker)}, '"
        else:
            spec["fields"] = ["a", f"b=1): {payload(marker)} #"]
    assert_rejected_without_running(rewrite(to_bytes(traced), edit_doc=edit), marker, lambda f: f(torch.randn(3)))


def test_string_constants_stay_strings(tmp_path):
    """A string argument reaches the code as a literal: a payload in it is never executed."""
    marker = tmp_path / "pwned"
    traced = tracejit.trace(lambda x, y: torch.div(x, y, rounding_mode="floor"), (torch.randn(3), torch.rand(3) + 1))

    def edit(doc):
        node = node_by_op(doc, "aten::div")
        node["kwargs"] = [[k, f"floor'); {payload(marker)} #\"); {payload(marker)} #" if k == "rounding_mode" else v]
                          for k, v in node["kwargs"]]
        assert [k for k, _ in node["kwargs"]] == ["rounding_mode"]
    try:
        f = load_bytes(rewrite(to_bytes(traced), edit_doc=edit))
    except tracejit.LoadError:
        f = None
    if f is not None:
        with pytest.raises(RuntimeError):
            f(torch.randn(3), torch.rand(3) + 1)
    assert not marker.exists()


def test_checksum_is_the_documented_one(small_net):
    """The crc32 field is the CRC32 of the whole file with its 8 hex digits set to 00000000."""
    raw = small_net[2]
    doc, _ = parse(raw)
    zeroed = raw.replace(f'crc32\\":\\"{doc["crc32"]}'.encode(), b'crc32\\":\\"00000000', 1)
    assert zeroed != raw
    assert f"{zlib.crc32(zeroed):08x}" == doc["crc32"]
    assert fix_crc(raw) == raw
    assert isinstance(load_bytes(io.BytesIO(raw).getvalue()), tracejit.TracedModule)


# ---------------------------------------------------------------------------------------------
# minimal repros of what test_fuzz.py found (each once let another exception escape load, or
# loaded a broken program): now each must be a LoadError saying what is wrong
# ---------------------------------------------------------------------------------------------

def test_node_with_more_outputs_than_its_op(small_fn):
    def edit(doc):
        node = node_by_op(doc, "aten::add")
        node["outputs"].append(dict(node["outputs"][0]))
    expect_load_error(rewrite(small_fn[1], edit_doc=edit), "output")


@pytest.mark.parametrize("op", ["tracejit::get_attr", "tracejit::constant"])
def test_tracejit_node_with_more_outputs_than_one(small_net, small_fn, op):
    raw = small_net[2] if op == "tracejit::get_attr" else small_fn[1]

    def edit(doc):
        node = node_by_op(doc, op)
        node["outputs"].append(dict(node["outputs"][0]))
    expect_load_error(rewrite(raw, edit_doc=edit), "output")


def test_callee_graph_is_validated_before_use(small_net):
    def edit(doc):
        method_graph(doc, "fc", "forward")["in_spec"]["children"].append({"kind": "tuple"})
    expect_load_error(rewrite(small_net[2], edit_doc=edit), "(args, kwargs)")


def test_call_module_with_fewer_args_than_the_callee(small_net):
    def edit(doc):
        node_by_op(doc, "tracejit::call_module")["args"] = []
    expect_load_error(rewrite(small_net[2], edit_doc=edit), "argument")


def test_empty_argument_name(small_fn):
    expect_load_error(rewrite(small_fn[1], edit_doc=lambda d: graphs(d)[0]["arg_names"].__setitem__(0, "")),
                      "argument name")


def test_child_path_that_is_not_a_string(small_net):
    raw = rewrite(small_net[2], edit_doc=lambda d: d["program"]["modules"][0]["children"][0].__setitem__(1, {"a": 1}))
    expect_load_error(raw, "child")


def test_callee_method_graph_index_that_is_not_an_int(small_net):
    def edit(doc):
        fc = next(m for m in doc["program"]["modules"] if m["path"] == "fc")
        fc["methods"][0][1] = [None, None]
    expect_load_error(rewrite(small_net[2], edit_doc=edit), "graph")


def test_module_hierarchy_cycle(small_net):
    raw = rewrite(small_net[2], edit_doc=lambda d: d["program"]["modules"][0]["children"].append(["me", ""]))
    expect_load_error(raw, "cycle", "me")


def test_child_that_is_an_ancestor(small_net):
    def edit(doc):
        children = doc["program"]["modules"][0]["children"]
        assert children[2][0] == "fc"
        children[2][1] = ""
    expect_load_error(rewrite(small_net[2], edit_doc=edit), "cycle", "fc")


def test_tensor_dtype_that_is_not_a_string(small_net):
    header, data = split(small_net[2])
    header["conv.weight"]["dtype"] = ["F32"]
    expect_load_error(raw_file(header, data), "conv.weight")


def test_input_leaves_naming_the_same_input_twice(small_fn):
    def edit(doc):
        g = graphs(doc)[0]
        assert g["input_leaves"] == [{"v": 0}, {"v": 1}]
        g["input_leaves"][1] = {"v": 0}
    expect_load_error(rewrite(small_fn[1], edit_doc=edit), "input")
