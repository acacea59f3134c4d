"""The export bound (docs/SECURITY.md): exporting a program loaded from a file is refused past a node budget
(``MAX_FILE_NODES``, submodule calls inlined, counted without inlining), in one line naming the count, the
limit and the flag that raises it; a program traced in this process has no budget unless asked for one.
The 49,941-node file itself is in tests/security/catalogue_tools.py (run in a capped child)."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit import cli
from tracejit.export import onnx_export
from tracejit.passes.inline import inline_calls


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.other = Block()

    def forward(self, x):
        return self.other(self.block(self.block(x)) * 2)


@pytest.fixture(scope="module")
def programs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(Stack().eval(), torch.randn(3, 4))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return traced, tracejit.load(io.BytesIO(buf.getvalue())), buf.getvalue()


def test_the_inlined_size_is_counted_without_inlining(programs):
    traced, loaded, _ = programs
    for program in (traced, loaded):
        graph = onnx_export.method_graph(program)
        assert onnx_export.inlined_size(graph) == len(inline_calls(graph).nodes) > len(graph.nodes)


def test_a_files_program_past_the_budget_is_refused_and_max_nodes_raises_it(programs, monkeypatch):
    traced, loaded, _ = programs
    n = onnx_export.inlined_size(onnx_export.method_graph(loaded))
    x = torch.randn(5, 4)
    monkeypatch.setattr(onnx_export, "MAX_FILE_NODES", n - 1)
    with pytest.raises(tracejit.ExportError, match=rf"the program has {n} nodes \(submodule calls inlined\), more than "
                                                   rf"the {n - 1} .*--max-nodes N \(export_onnx\(\.\.\., max_nodes=N\)\)"):
        tracejit.export_onnx(loaded)
    assert len(tracejit.export_onnx(traced).graph.node) > 0   # traced here: the user's own, no budget
    with pytest.raises(tracejit.ExportError, match="more than the 3 ONNX export takes"):
        tracejit.export_onnx(traced, max_nodes=3)   # unless asked for one
    with pytest.raises(ValueError, match="max_nodes must be a positive int"):
        tracejit.export_onnx(traced, max_nodes=0)
    ort = pytest.importorskip("onnxruntime")
    proto = tracejit.export_onnx(loaded, max_nodes=n)   # raised by the caller: exports, and runs like the program
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(got), loaded(x))


def test_the_cli_refuses_in_one_line_and_takes_max_nodes(programs, tmp_path, monkeypatch, capsys):
    _, loaded, raw = programs
    n = onnx_export.inlined_size(onnx_export.method_graph(loaded))
    path = tmp_path / "stack.tjit"
    path.write_bytes(raw)
    monkeypatch.setattr(onnx_export, "MAX_FILE_NODES", n - 1)
    with pytest.raises(SystemExit) as e:
        cli.main(["export", str(path), "-o", str(tmp_path / "m.onnx")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("tracejit: error: ") and f"has {n} nodes" in err[0] and "--max-nodes N" in err[0]
    assert cli.main(["export", str(path), "-o", str(tmp_path / "m.onnx"), "--max-nodes", str(n)]) == 0
    assert (tmp_path / "m.onnx").stat().st_size > 0
