"""A concatenation of concatenations along one axis is one ``Concat`` in the onnxruntime backend's model of the traced
sizes (export/concat_chains.py), and only then."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

import tracejit
from tracejit.backends.onnxruntime import OrtProgram
from tracejit.export.concat_chains import flatten_concats

ir = pytest.importorskip("onnx_ir")
pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _model(inner_axis: int, *, twice: bool = False, nested: bool = False):
    """``Concat(a, Concat(b, c, axis=inner_axis), d, axis=1)`` on (2, 3, 4) inputs (b, c: (2, 3, 2) along axis 2); ``twice``: the inner result is an
    output too; ``nested``: the inner concat reads another one (``Concat(b, c)`` of ``Concat(e, f)``)."""
    names = "abcdef" if nested else "abcd"
    half = inner_axis % 3 == 2   # b and c joined along the last axis into one (2, 3, 4) block
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 2] if half and n in "bc" else [2, 3, 4])
              for n in names]
    nodes = []
    if nested:
        nodes.append(helper.make_node("Concat", ["e", "f"], ["ef"], axis=1))
        nodes.append(helper.make_node("Concat", ["b", "ef", "c"], ["bc"], axis=inner_axis))
    else:
        nodes.append(helper.make_node("Concat", ["b", "c"], ["bc"], axis=inner_axis))
    nodes.append(helper.make_node("Concat", ["a", "bc", "d"], ["y"], axis=1))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if twice:
        outputs.append(helper.make_tensor_value_info("bc", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    return ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model))


@pytest.mark.parametrize("inner_axis, twice, nested, removed", [
    (1, False, False, 1),     # the same axis: one Concat
    (-2, False, False, 1),    # the same axis, counted from the end
    (2, False, False, 0),     # another axis: a different layout
    (1, True, False, 0),      # the inner result is read elsewhere too
    (1, False, True, 2),      # three levels: one Concat
], ids=["same-axis", "negative-axis", "other-axis", "read-twice", "nested"])
def test_only_a_concat_along_the_same_axis_is_flattened(inner_axis, twice, nested, removed):
    model = _model(inner_axis, twice=twice, nested=nested)
    rng = np.random.default_rng(0)
    feed = {v.name: rng.standard_normal(tuple(v.shape)).astype(np.float32) for v in model.graph.inputs}
    ort = pytest.importorskip("onnxruntime")

    def run(m):
        data = ir.serde.serialize_model(m).SerializeToString()
        return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(["y"], feed)[0]
    before = run(model)
    assert flatten_concats(model.graph) == removed
    assert [n.op_type for n in model.graph].count("Concat") == (3 if nested else 2) - removed
    np.testing.assert_array_equal(run(model), before)   # the same elements in the same order


class InceptionE(nn.Module):
    """torchvision's InceptionE: two branches that each concatenate two convs, concatenated with the others."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.a, self.b1, self.b2 = nn.Conv2d(c, 4, 1), nn.Conv2d(c, 4, (1, 3), padding=(0, 1)), nn.Conv2d(c, 4, (3, 1),
                                                                                                         padding=(1, 0))
        self.c1, self.c2 = nn.Conv2d(c, 4, (1, 3), padding=(0, 1)), nn.Conv2d(c, 4, (3, 1), padding=(1, 0))

    def forward(self, x):
        return torch.relu(torch.cat([self.a(x), torch.cat([self.b1(x), self.b2(x)], 1),
                                     torch.cat([self.c1(x), self.c2(x)], 1)], 1))


def test_inception_block_runs_one_concat_with_eager_answers(tmp_path):
    torch.manual_seed(0)
    net = InceptionE().eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(net, (torch.randn(1, 8, 9, 9),))
    path = tmp_path / "optimized.onnx"
    program = OrtProgram(traced, optimized_model_path=path, threads=1)
    assert [n.op_type for n in onnx.load(str(path)).graph.node].count("Concat") == 1
    for shape in [(1, 8, 9, 9), (2, 8, 5, 7), (1, 8, 9, 9)]:   # pinned, dynamic, pinned
        x = torch.randn(shape)
        with torch.no_grad():
            np.testing.assert_allclose(program(x).numpy(), net(x).numpy(), rtol=1e-5, atol=1e-5)
