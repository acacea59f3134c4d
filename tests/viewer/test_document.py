"""The viewer's data and page, without a browser: every node of every graph is described, with
its op, types, source line and ledger mark; submodule calls point at their callee's graph; the
page is self-contained."""
from __future__ import annotations

import re
import warnings

import torch
from torch import nn

import tracejit
from tracejit.viewer import program_document, render_html


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Block()
        self.b = Block()

    def forward(self, x, pair):
        y = self.b(self.a(x)) + pair[0]
        y = y * 2 if y.sum() > -1e9 else y    # a branch on a tensor value: a ledger entry on this line
        return y, pair[1]


def traced_net():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(Net(), (torch.randn(2, 4), (torch.randn(2, 4), torch.randn(3))))


def test_document_describes_every_graph_and_node():
    t = traced_net()
    doc = program_document(t)
    assert doc["roots"] == [":forward"] and doc["name"] == "Net"
    assert "1 training guard (orange nodes)" in doc["guards"] and "1 value guard (orange nodes)" in doc["guards"]
    assert set(doc["graphs"]) == {":forward", "a:forward", "b:forward", "a.lin:forward", "b.lin:forward"}
    root = doc["graphs"][":forward"]["nodes"]
    ir = t.graph
    assert len(root) == len(ir.inputs) + len(ir.nodes) + len(ir.outputs)
    inputs = [n for n in root if n["kind"] == "input"]
    assert [n["label"] for n in inputs] == ["x", "pair_0", "pair_1"]
    assert inputs[0]["type"] == "Float[2, 4]" and inputs[0]["guard"] == "checked: is a Tensor"
    structures = doc["graphs"][":forward"]["structures"]
    assert structures[inputs[1]["structure"]] == "(Float[2, 4], Float[3])" and inputs[0].get("structure") is None
    calls = [n for n in root if n["kind"] == "call"]
    assert [n["call"] for n in calls] == ["a:forward", "b:forward"]
    # the call to b takes a's output
    assert calls[1]["args"] == [[root.index(calls[0]), 0]]
    lin = doc["graphs"]["a.lin:forward"]["nodes"]
    assert {n["label"] for n in lin if n["kind"] == "parameter"} == {"weight", "bias"}
    mul = next(n for n in root if n.get("op", "").startswith("aten::mul"))
    assert mul["type"] == "Float[2, 4]" and re.search(r"test_document\.py:\d+ \(forward\)", mul["source"])
    add = next(n for n in root if n.get("op", "").startswith("aten::add"))
    assert mul["ledger"] and not add["ledger"]
    guards = [n for n in root if n["kind"] == "guard"]
    assert [n["label"] for n in guards] == ["guard training", "guard value"]
    assert "traced in train mode" in guards[0]["guard"] and guards[1]["source"] == mul["source"]
    assert any(e["kind"] == "value_read" for e in doc["ledger"])
    assert doc["node_count"] == sum(len(g["nodes"]) for g in doc["graphs"].values())


def test_page_is_self_contained(tmp_path):
    t = traced_net()
    path = t.to_html(tmp_path / "net.html")
    page = open(path, encoding="utf-8").read()
    assert page == render_html(program_document(t))
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)
    assert "sourceMappingURL" not in page
    assert "dagre" in page and "MIT" in page               # the vendored layout library and its licence
    data = page.split("window.TRACEJIT = ", 1)[1].split(";</script>", 1)[0]
    assert "</script" not in data.lower()


def test_view_reads_a_saved_file_and_the_cli(tmp_path, capsys):
    from tracejit.cli import main
    t = traced_net()
    tracejit.save(t, tmp_path / "net.tjit")
    tracejit.view(str(tmp_path / "net.tjit"), tmp_path / "a.html")
    assert main(["view", str(tmp_path / "net.tjit"), "-o", str(tmp_path / "b.html")]) == 0
    assert "b.html" in capsys.readouterr().out
    a, b = (tmp_path / "a.html").read_text(), (tmp_path / "b.html").read_text()
    assert a == b and '"node_count":' in a


def test_function_document():
    f = tracejit.trace(lambda x, y: (x * 2 + y).relu(), (torch.ones(3), torch.ones(3)))
    doc = program_document(f)
    assert doc["kind"] == "function" and doc["roots"] == [":forward"] and len(doc["guards"]) == 1
    nodes = doc["graphs"][":forward"]["nodes"]
    assert [n["label"] for n in nodes] == ["x", "y", "mul", "add", "relu", "output 0"]
    assert nodes[4]["inputs"] == [[3, 0]] and nodes[5]["inputs"] == [[4, 0]]
