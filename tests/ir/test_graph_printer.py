"""The IR as traced and printed: `.graph`, `.inlined_graph`, `str(traced)`, and which ops are recorded.

Covers the printer (tracejit/ir/printer.py) through the public `.graph` / `.inlined_graph`
properties, plus the recording level (ops are recorded where Python enters PyTorch's operator
library, with their ATen overload).
"""
from __future__ import annotations

import inspect
import io
import os
import re
import time
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tracejit
from tracejit.ir import Graph, Node, SourceLoc, TensorType, format_graph

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")

_DTYPE = {torch.float32: "Float", torch.float64: "Double", torch.int64: "Long", torch.bool: "Bool",
          torch.float16: "Half", torch.int32: "Int"}

# one printed definition: `%name : Type` (or `_` for an unused result slot)
_DEF = r"(?:%\w+ : \w+\([^()]*\)|%\w+ : \w+|_)"
_NODE_LINE = re.compile(rf"^  (?P<lhs>{_DEF}(?:, {_DEF})*|\(\)) = (?P<op>[\w:.]+)(?P<attrs>\[[^\]]*\])?"
                        rf"\((?P<args>.*)\)(?:\s+# (?P<file>.+):(?P<line>\d+))?$")


def _type_text(t: torch.Tensor) -> str:
    dims = ", ".join(str(s) for s in t.shape)
    return f"{_DTYPE[t.dtype]}({dims}{', ' if dims else ''}device={t.device})"


def _line_of(fn, needle: str) -> int:
    """Absolute line number of the (unique) line of ``fn``'s source containing ``needle``."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if needle in text]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


def _parse(text: str):
    """Parse a printed graph: returns (inputs, [(defined names, op, used names, file, line)], returns)."""
    lines = text.rstrip("\n").split("\n")
    assert lines[0].startswith("graph(") and lines[-1].startswith("  return (")
    head = []
    i = 0
    while True:
        head.append(lines[i])
        if lines[i].endswith("):"):
            break
        i += 1
    inputs = re.findall(r"%(\w+) :", "\n".join(head))
    body = []
    for line in lines[i + 1:-1]:
        m = _NODE_LINE.match(line)
        assert m, f"not a node line: {line!r}"
        defined = re.findall(r"%(\w+) :", m["lhs"])
        used = re.findall(r"%(\w+)", m["args"])
        body.append((defined, m["op"], used, m["file"], int(m["line"]) if m["line"] else None))
    returns = re.findall(r"%(\w+)", lines[-1])
    return inputs, body, returns


def _all_graphs(traced):
    if isinstance(traced, nn.Module):
        for path, m in traced.named_modules():
            for name, fn in m._traced_methods.items():
                yield f"{path or '<root>'}.{name}", fn.graph
    else:
        yield "<fn>", traced.graph


# --------------------------------------------------------------------------------------------------
# .graph printing


def conv_then_add(x, w):
    y = F.conv2d(x, w, padding=1)
    z = y + x.sum(1, keepdim=True)
    return z.view(z.size(0), -1)


def test_graph_prints_types_ops_and_user_source_lines():
    x, w = torch.randn(2, 3, 5, 5), torch.randn(4, 3, 3, 3)
    traced = tracejit.trace(conv_then_add, (x, w))
    text = str(traced.graph)

    # header: the inputs, named after the parameters, with their traced types
    assert re.search(r"%x : Float\(2, 3, 5, 5, device=cpu\)", text)
    assert re.search(r"%w : Float\(4, 3, 3, 3, device=cpu\)", text)

    lines = {op: [l for l in text.splitlines() if f"= {op}" in l] for op in
             ("aten::conv2d", "aten::add", "aten::sum", "aten::view")}
    for op, found in lines.items():
        assert len(found) == 1, (op, text)

    expected = {
        "aten::conv2d": ("F.conv2d(", "Float(2, 4, 5, 5, device=cpu)"),
        "aten::add": ("y + x.sum", "Float(2, 4, 5, 5, device=cpu)"),
        "aten::sum": ("y + x.sum", "Float(2, 1, 5, 5, device=cpu)"),
        "aten::view": ("z.view(", "Float(2, 100, device=cpu)"),
    }
    for op, (needle, type_text) in expected.items():
        line = lines[op][0]
        m = _NODE_LINE.match(line)
        assert m, line
        assert m["lhs"].endswith(": " + type_text), line
        assert os.path.basename(m["file"]) == os.path.basename(__file__), line
        assert int(m["line"]) == _line_of(conv_then_add, needle), line


def test_graph_node_source_matches_printed_location():
    traced = tracejit.trace(conv_then_add, (torch.randn(1, 3, 4, 4), torch.randn(2, 3, 3, 3)))
    conv = [n for n in traced.graph.nodes if n.op.startswith("aten::conv2d")]
    assert len(conv) == 1
    src = conv[0].source
    assert os.path.samefile(src.filename, __file__)
    assert src.lineno == _line_of(conv_then_add, "F.conv2d(")


def mixed_dtypes(x, idx):
    pos = x > 0
    best = x.argmax(-1)
    picked = x.index_select(0, idx)
    total = picked.sum()
    return pos, best, picked.float(), total


def test_graph_types_are_those_seen_while_tracing():
    x, idx = torch.randn(4, 6, dtype=torch.float64), torch.tensor([2, 0, 1])
    traced = tracejit.trace(mixed_dtypes, (x, idx))
    eager = mixed_dtypes(x, idx)
    text = str(traced.graph)
    assert "%x : Double(4, 6, device=cpu)" in text
    assert "%idx : Long(3, device=cpu)" in text
    by_op = {n.op.split(".")[0]: n for n in traced.graph.nodes}
    want = {"aten::gt": eager[0], "aten::argmax": eager[1], "aten::index_select": x.index_select(0, idx),
            "aten::sum": eager[3]}
    for op, tensor in want.items():
        line = next(l for l in text.splitlines() if f"= {op}." in l)
        assert f": {_type_text(tensor)} = " in line, line
        assert str(by_op[op].outputs[0].type) == _type_text(tensor)
    # 0-dim tensors print without dims
    assert "Double(device=cpu)" in text
    # tracing the same function at another shape prints the other shape
    other = str(tracejit.trace(mixed_dtypes, (torch.randn(2, 7, dtype=torch.float64), torch.tensor([1]))).graph)
    assert "%x : Double(2, 7, device=cpu)" in other and "Double(4, 6" not in other


def test_printed_graph_is_ssa_one_definition_per_value():
    traced = tracejit.trace(conv_then_add, (torch.randn(2, 3, 5, 5), torch.randn(4, 3, 3, 3)))
    inputs, body, returns = _parse(str(traced.graph))
    assert inputs == ["x", "w"]
    assert len(body) == len(traced.graph.nodes)
    seen = set(inputs)
    for defined, op, used, _, _ in body:
        assert len(defined) == 1, "each of these ops defines one value, on its own line"
        assert set(used) <= seen, f"{op} uses {used} before definition"
        assert not (set(defined) & seen), f"{defined} defined twice"
        seen |= set(defined)
    assert returns and set(returns) <= seen


def test_printer_on_hand_built_graph_matches_documented_format():
    g = Graph(name="forward")
    x = g.add_input(TensorType(torch.float32, (2, 4), "cpu"), hint="x")
    w = g.add_input(TensorType(torch.float32, (3, 4), "cpu"), hint="weight")
    lin = g.add_node(Node("aten::linear.default", "fn:torch._C._nn.linear", (x, w, None),
                          source=SourceLoc("model.py", 12)), [TensorType(torch.float32, (2, 3), "cpu")])
    rel = g.add_node(Node("aten::relu.default", "fn:torch.relu", (lin.outputs[0],), source=SourceLoc("model.py", 13)),
                     [TensorType(torch.float32, (2, 3), "cpu")])
    g.outputs = [rel.outputs[0]]
    text = format_graph(g)
    assert text == str(g)
    lines = text.splitlines()
    assert lines[0] == "graph(%x : Float(2, 4, device=cpu),"
    assert lines[1].strip() == "%weight : Float(3, 4, device=cpu)):"
    assert re.fullmatch(r"  %(\w+) : Float\(2, 3, device=cpu\) = aten::linear\.default\(%x, %weight, None\)"
                        r"\s+# model\.py:12", lines[2])
    first = re.match(r"  %(\w+)", lines[2]).group(1)
    m = re.fullmatch(rf"  %(\w+) : Float\(2, 3, device=cpu\) = aten::relu\.default\(%{first}\)\s+# model\.py:13",
                     lines[3])
    assert m and m.group(1) != first
    assert lines[4] == f"  return (%{m.group(1)})"
    # without sources / types
    bare = format_graph(g, with_source=False, with_types=False)
    assert "#" not in bare and "Float" not in bare and "aten::relu.default" in bare


def test_printer_gives_distinct_names_to_inputs_with_the_same_hint():
    g = Graph()
    t = TensorType(torch.float32, (3,), "cpu")
    a, b = g.add_input(t, hint="x"), g.add_input(t, hint="x")
    n = g.add_node(Node("aten::add.Tensor", "op:+", (a, b)), [t])
    g.outputs = [n.outputs[0]]
    inputs, body, returns = _parse(str(g))
    assert len(set(inputs)) == 2
    assert body[0][2] == inputs  # add(%x, %x_1): both inputs, in order


# --------------------------------------------------------------------------------------------------
# modules: hierarchy, call_module, inlined_graph


class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = ConvBlock()
        self.head = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x):
        h = self.block(x).mean((2, 3))
        return self.head(h)


def test_str_traced_module_shows_hierarchy_with_original_class_names():
    traced = tracejit.trace(Net().eval(), torch.randn(2, 3, 6, 6))
    text = str(traced)
    assert text.splitlines()[0].startswith("Net(")
    assert "original_name=Net" in text
    for name, cls in [("block", "ConvBlock"), ("conv", "Conv2d"), ("bn", "BatchNorm2d"), ("head", "Sequential"),
                      ("0", "Linear"), ("1", "ReLU"), ("2", "Linear")]:
        assert re.search(rf"\({name}\): {cls}\(\s*original_name={cls}\b", text), (name, cls, text)
    # nesting: conv is listed inside block, which is indented less
    indent = {name: len(l) - len(l.lstrip()) for l in text.splitlines()
              for name in ("block", "conv", "head") if l.lstrip().startswith(f"({name})")}
    assert indent["conv"] > indent["block"] == indent["head"]


def test_submodule_calls_are_call_module_nodes_and_submodule_graphs_hold_the_ops():
    net = Net().eval()
    traced = tracejit.trace(net, torch.randn(2, 3, 6, 6))
    root_ops = [n.op for n in traced.graph.nodes]
    calls = [n for n in traced.graph.nodes if n.op == "tracejit::call_module"]
    assert [n.attrs["path"] for n in calls] == ["block", "head"]
    assert not any(op.startswith(("aten::conv2d", "aten::linear", "aten::batch_norm")) for op in root_ops)
    assert any(op.startswith("aten::mean") for op in root_ops)
    text = str(traced.graph)
    assert "tracejit::call_module" in text and "path='block'" in text

    block = traced.block
    assert [n.attrs["path"] for n in block.graph.nodes if n.op == "tracejit::call_module"] == ["conv", "bn"]
    assert any(n.op.startswith("aten::relu") for n in block.graph.nodes)
    assert "aten::conv2d" in str(block.conv.graph)
    assert "aten::batch_norm" in str(block.bn.graph)
    assert "aten::linear" in str(getattr(traced.head, "0").graph)
    assert "aten::relu" in str(traced.get_submodule("head.1").graph)


def test_inlined_graph_has_no_calls_and_full_attribute_paths():
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    traced = tracejit.trace(mlp, torch.randn(3, 4))
    assert "tracejit::call_module" in str(traced.graph)
    inl = traced.inlined_graph
    text = str(inl)
    assert "tracejit::call_module" not in text
    assert not any(n.op == "tracejit::call_module" for n in inl.nodes)
    assert text.count("= aten::linear") == 2
    assert "aten::relu" in text
    paths = [n.attrs["path"] for n in inl.nodes if n.op == "tracejit::get_attr"]
    assert sorted(paths) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    for p in paths:
        assert f"path='{p}'" in text
        assert traced.get_parameter(p) is mlp.get_parameter(p)
    # inlining does not change the module's own graph
    assert "tracejit::call_module" in str(traced.graph)


def test_inlined_graph_of_nested_modules_uses_full_dotted_paths():
    traced = tracejit.trace(Net().eval(), torch.randn(2, 3, 6, 6))
    inl = traced.inlined_graph
    paths = {n.attrs["path"] for n in inl.nodes if n.op == "tracejit::get_attr"}
    assert {"block.conv.weight", "block.bn.running_mean", "head.0.weight", "head.2.bias"} <= paths
    for p in paths:
        owner, _, leaf = p.rpartition(".")
        sub = traced.get_submodule(owner)
        assert leaf in sub._parameters or leaf in sub._buffers, p
    ops = [n.op.split(".")[0] for n in inl.nodes]
    for op in ("aten::conv2d", "aten::batch_norm", "aten::relu", "aten::mean", "aten::linear"):
        assert op in ops


# --------------------------------------------------------------------------------------------------
# recording level


def test_linear_conv_layernorm_record_composite_ops_not_decompositions():
    cases = [
        (nn.Linear(4, 3), torch.randn(2, 4), "aten::linear"),
        (nn.Conv2d(3, 2, 3), torch.randn(1, 3, 5, 5), "aten::conv2d"),
        (nn.LayerNorm(6), torch.randn(2, 6), "aten::layer_norm"),
    ]
    banned = {"aten::addmm", "aten::mm", "aten::matmul", "aten::t", "aten::convolution", "aten::_convolution",
              "aten::native_layer_norm", "aten::mul", "aten::add"}
    for mod, x, op in cases:
        traced = tracejit.trace(mod, x)
        ops = [n.op for n in traced.graph.nodes if n.op.startswith("aten::")]
        assert [o.split(".")[0] for o in ops] == [op], ops
        assert not banned & {o.split(".")[0] for o in ops}


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_sdpa_is_one_node():
    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    traced = tracejit.trace(sdpa, (q, k, v))
    ops = [n.op.split(".")[0] for n in traced.graph.nodes]
    assert ops == ["aten::scaled_dot_product_attention"]
    q2, k2, v2 = (torch.randn(2, 2, 7, 4) for _ in range(3))
    torch.testing.assert_close(traced(q2, k2, v2), sdpa(q2, k2, v2))
    assert not torch.allclose(traced(q2, k2, v2), traced(q2, k2, v2 + 1))


def upsample(x):
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


def upsample_nearest(x):
    return F.interpolate(x, size=(6, 6), mode="nearest")


@pytest.mark.parametrize("fn, op", [(upsample, "aten::upsample_bilinear2d"),
                                    (upsample_nearest, "aten::upsample_nearest2d")])
def test_interpolate_is_traced_through_to_upsample(fn, op):
    traced = tracejit.trace(fn, torch.randn(1, 2, 3, 3))
    names = [n.op for n in traced.graph.nodes if n.op != "tracejit::guard"]   # interpolate reads the rank
    assert [n.split(".")[0] for n in names] == [op]
    assert not any("interpolate" in n for n in names)
    assert "interpolate" not in str(traced.graph).split("#")[0]
    x2 = torch.randn(2, 2, 4, 5)
    torch.testing.assert_close(traced(x2), fn(x2))
    assert not torch.equal(traced(x2), traced(x2 * 2))


def index_row(x):
    return x[0, 1:]


def test_indexing_records_select_and_slice():
    traced = tracejit.trace(index_row, torch.randn(3, 5))
    assert [n.op for n in traced.graph.nodes] == ["aten::select.int", "aten::slice.Tensor"]
    x2 = torch.randn(4, 7)
    torch.testing.assert_close(traced(x2), index_row(x2))
    assert traced(x2).shape == (6,)


def _misc_ops(x, y):
    a = x + y - x * 2 / (y.abs() + 1)
    b = torch.cat([a, -x], 0).sum(dim=1, keepdim=True)
    c = torch.where(x > 0, x, y).transpose(0, 1).contiguous().reshape(-1)
    d = F.softmax(x, -1) @ F.gelu(y).t()
    e = x.unsqueeze(0).expand(2, -1, -1).flatten(1) ** 2
    f = x[1:, ::2].clamp(min=0.0) + x.mean()
    g = (1 - x).max(dim=1).values + x.chunk(2, dim=1)[0].sum(1)
    return a, b, c, d, e, f, g, x.new_zeros(x.size(0) * 2)


def _in_place(x):
    y = x.clone()
    y.mul_(2)
    y[0] = 1.0
    y += 1
    return y


def _corpus():
    torch.manual_seed(0)
    return {
        "misc": (_misc_ops, (torch.randn(4, 4), torch.randn(4, 4))),
        "mlp": (nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(3, 4)),
        "convbn": (nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval(), torch.randn(1, 3, 8, 8)),
        "attention": (nn.MultiheadAttention(8, 2, batch_first=True).eval(),
                      (torch.randn(2, 3, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 8))),
        "lstm": (nn.LSTM(4, 5, batch_first=True), torch.randn(2, 3, 4)),
        "encoder": (nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval(),
                    torch.randn(2, 3, 8)),
        "interp": (upsample, torch.randn(1, 2, 4, 4)),
        "indexing": (index_row, torch.randn(3, 4)),
        "inplace": (_in_place, torch.randn(3, 4)),
        "embedding_gn": (nn.Sequential(nn.Embedding(10, 4), nn.GroupNorm(2, 2)), torch.tensor([[1, 2], [3, 4]])),
    }


@pytest.mark.parametrize("name", list(_corpus()))
def test_every_aten_node_names_an_existing_overload(name):
    fn, example = _corpus()[name]
    traced = tracejit.trace(fn, example)
    n_aten = 0
    for where, graph in _all_graphs(traced):
        for node in graph.nodes:
            if node.op.startswith("tracejit::"):
                assert node.op in {"tracejit::get_attr", "tracejit::constant", "tracejit::call_module",
                                   "tracejit::getitem", "tracejit::setitem", "tracejit::guard"}, node.op
                continue
            n_aten += 1
            assert re.fullmatch(r"aten::\w+\.\w+", node.op), f"{where}: {node.op}"
            base, overload = node.op[len("aten::"):].split(".")
            packet = getattr(torch.ops.aten, base)
            assert isinstance(getattr(packet, overload), torch._ops.OpOverload), node.op
            assert node.name == base
            # and the printed graph shows exactly that name
            assert f"= {node.op}(" in str(graph) or f"= {node.op}[" in str(graph)
    assert n_aten > 0


# --------------------------------------------------------------------------------------------------
# scaling


class _Chain(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.mark.slow
def test_printing_code_and_graphs_of_2000_submodules_is_fast():
    n = 2000
    torch.manual_seed(0)
    model = _Chain(n).eval()
    with torch.no_grad():
        for layer in model.layers:  # keep activations O(1) through 2000 layers
            layer.weight.copy_(torch.eye(4) + 0.01 * torch.randn(4, 4))
            layer.bias.zero_()
    t0 = time.perf_counter()
    traced = tracejit.trace(model, torch.randn(2, 4), check_trace=False)
    trace_s = time.perf_counter() - t0

    out = io.StringIO()
    t0 = time.perf_counter()
    n_methods = 0
    for path, m in traced.named_modules():
        for name in m._traced_methods:
            print(getattr(m, name).code, file=out)
            print(str(getattr(m, name).graph), file=out)
            n_methods += 1
    print_s = time.perf_counter() - t0

    assert n_methods == n + 1  # the root and every Linear (the ModuleList itself is never called)
    printed = out.getvalue()
    assert printed.count("tracejit::call_module") == n
    assert printed.count("= aten::linear") == n
    assert traced.code.count(".forward(") == n
    assert print_s < 1.0, f"printing took {print_s:.2f}s (tracing took {trace_s:.2f}s)"
    x = torch.randn(3, 4)
    torch.testing.assert_close(traced(x), model(x))
