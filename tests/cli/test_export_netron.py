"""``tracejit view FILE --netron`` (tracejit/cli/netron.py): writes the ONNX model with source lines in
its doc strings, and opens it with the netron package, or prints the install hint without it."""
from __future__ import annotations

import os
import sys
import types

import pytest
import torch
from torch import nn

import tracejit
from tracejit import cli

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return torch.tanh(self.lin(x))   # TANH LINE


def saved(tmp_path) -> str:
    with torch.no_grad():
        traced = tracejit.trace(Small().eval(), torch.randn(2, 4))
    path = str(tmp_path / "small.tjit")
    tracejit.save(traced, path)
    return path


def run_cli(capsys, *argv):
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def tanh_doc(path) -> str:
    return next(n.doc_string for n in onnx.load(path).graph.node if n.op_type == "Tanh")


def test_without_netron_it_saves_the_annotated_model_and_prints_the_hint(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "netron", None)   # `import netron` raises ImportError
    path = saved(tmp_path)
    code, out, err = run_cli(capsys, "view", path, "--netron")
    assert code == 0, err
    onnx_path = os.path.splitext(path)[0] + ".onnx"
    assert out.startswith(f"{onnx_path}: ONNX model of {path}")
    assert f"netron is not installed: pip install netron, then `netron {onnx_path}`" in out
    line = Small.forward.__code__.co_firstlineno + 1
    assert f"test_export_netron.py:{line} (in forward)" in tanh_doc(onnx_path)


def test_with_netron_it_serves_the_model(tmp_path, capsys, monkeypatch):
    calls = []
    fake = types.ModuleType("netron")
    fake.start = lambda file, *a, **k: calls.append(("start", file)) or ("localhost", 8081)
    fake.wait = lambda: calls.append(("wait",))
    monkeypatch.setitem(sys.modules, "netron", fake)
    path = saved(tmp_path)
    out_path = str(tmp_path / "picked.onnx")
    code, out, err = run_cli(capsys, "view", path, "--netron", "-o", out_path)
    assert code == 0, err
    assert calls == [("start", out_path), ("wait",)]
    assert f"serving {out_path} in Netron at http://localhost:8081" in out
    assert "aten::tanh" in tanh_doc(out_path)


def test_without_the_flag_view_still_writes_the_html_page(tmp_path, capsys):
    path = saved(tmp_path)
    code, out, err = run_cli(capsys, "view", path, "-o", str(tmp_path / "small.html"))
    assert code == 0, err
    assert (tmp_path / "small.html").exists() and not (tmp_path / "small.onnx").exists()
