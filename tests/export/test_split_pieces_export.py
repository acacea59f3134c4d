"""``torch.split(x, n, dim)`` by one piece size (CodeGen / GPT-J's ``torch.split(qkv, local_dim, dim=-1)``) exports as
a plain ``Split`` with the pieces' sizes computed from the axis' length and the traced count (export/sequences.py), not
as ``SplitToSequence`` + ``SequenceAt``: OpenVINO cannot read ``SplitToSequence`` (its backend refused CodeGen:
"Model wasn't fully converted"). Eager's answers on new lengths with the traced count of pieces, in onnxruntime and
OpenVINO; a length that makes another count still fails the export's named size guard."""
from __future__ import annotations

import pytest
import torch

import tracejit

ort = pytest.importorskip("onnxruntime")


def pieces(x):
    first, *_, last = x.split(4, dim=-1)
    return first * 2 + last.sum(-1, keepdim=True)


def _traced():
    return tracejit.trace(pieces, torch.randn(2, 5, 10))   # 3 pieces: 4, 4, 2


def _ort(proto, x):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


NEW = [(2, 5, 10), (3, 2, 11), (1, 7, 9), (4, 1, 12)]   # 3 pieces each, the last 2, 3, 1, 4 long


def test_split_by_one_size_exports_as_a_plain_split_with_eagers_answers():
    proto = tracejit.export_onnx(_traced())
    assert not any("Sequence" in n.op_type for n in proto.graph.node if n.op_type != "SplitToSequence"), \
        [n.op_type for n in proto.graph.node]
    for shape in NEW:
        x = torch.randn(*shape)
        torch.testing.assert_close(_ort(proto, x), pieces(x), rtol=1e-6, atol=1e-6)
    with pytest.raises(Exception, match="tracejit_guard"):   # 13 -> 4 pieces: the size guard names itself
        _ort(proto, torch.randn(3, 2, 13))


def test_openvino_runs_a_split_by_one_size():
    pytest.importorskip("openvino")
    program = tracejit.optimize_for_inference(_traced(), backend="openvino")
    for shape in NEW:
        x = torch.randn(*shape)
        torch.testing.assert_close(program(x), pieces(x), rtol=1e-6, atol=1e-6)
