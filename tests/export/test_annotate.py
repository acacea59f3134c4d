"""export_onnx(doc_strings=True) (tracejit/export/annotate.py): every ONNX node names the ATen op, the
user's source line and the ledger entries at that line, for Netron; the model still runs the same."""
from __future__ import annotations

import os

import onnxruntime as ort
import pytest
import torch
from torch import nn

import tracejit

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")
HERE = os.path.basename(__file__)


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(6, 4)

    def forward(self, x):
        h = self.proj(x)
        if x.size(0) > 1:   # a size used as a Python bool: a ledger entry and a guard at this line
            h = h * 2
        return torch.sigmoid(h) * x[:, :4]   # SIGMOID LINE


def line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if marker in text and "line_of" not in text)


def export(model, example, **kw):
    with torch.no_grad():
        traced = tracejit.trace(model, example)
    return traced, tracejit.export_onnx(traced, **kw)


def test_nodes_name_their_op_source_line_and_ledger_entries():
    traced, proto = export(Gate().eval(), torch.randn(3, 6), doc_strings=True)
    sigmoid = [n for n in proto.graph.node if n.op_type == "Sigmoid"]
    assert len(sigmoid) == 1
    doc = sigmoid[0].doc_string
    assert doc.splitlines()[0] == "aten::sigmoid.default"
    assert f"{HERE}:{line_of('# SIGMOID LINE')} (in forward)" in doc
    guard_line = f"{HERE}:{line_of('# a size used as a Python bool')}"
    size_nodes = [n for n in proto.graph.node if guard_line in n.doc_string]
    assert size_nodes, "the nodes of the guarded line carry its source"
    assert any("ledger: [size]" in n.doc_string and "value seen: 3" in n.doc_string for n in size_nodes)
    gemm = [n for n in proto.graph.node if n.op_type == "Gemm"]
    assert gemm and "module: proj" in gemm[0].doc_string   # its source is torch's Linear.forward; the call:
    assert f"called from: {__file__}:{line_of('h = self.proj(x)')} (proj)" in gemm[0].doc_string
    assert all(n.doc_string for n in proto.graph.node if n.op_type != "Identity")
    assert "ledger (2 entries)" in proto.doc_string and f"{guard_line}: [size]" in proto.doc_string


def test_doc_strings_are_off_by_default_and_change_no_result(tmp_path):
    model = Gate().eval()
    _, plain = export(model, torch.randn(3, 6))
    assert not any(n.doc_string for n in plain.graph.node)
    path = str(tmp_path / "gate.onnx")
    with torch.no_grad():
        traced = tracejit.trace(model, torch.randn(3, 6))
    tracejit.export_onnx(traced, path, doc_strings=True)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = torch.randn(7, 6)
    (got,) = session.run(None, {"x": x.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(got), model(x), rtol=1e-4, atol=1e-5)
