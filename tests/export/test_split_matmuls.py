"""A linear split along its features is one linear per piece in the onnxruntime backend's model of the traced sizes
(export/split_matmuls.py): the same bits as the split product, on the traced and on new shapes, and only where the
rewrite holds."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import tracejit
from tracejit.backends.onnxruntime import OrtProgram
from tracejit.export import static_shapes
from tracejit.export.split_matmuls import split_matmul_outputs

ir = pytest.importorskip("onnx_ir")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class GatedMlp(nn.Module):
    """timm's GluMlp: one linear, its features split in two, one half gating the other."""

    def __init__(self, features=24, hidden=40, bias=True):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(features, 2 * hidden, bias=bias), nn.Linear(hidden, features)

    def forward(self, x):
        a, b = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(nn.functional.silu(a) * b)


def _programs(module, x, monkeypatch):
    traced = tracejit.trace(module, (x,))
    split = OrtProgram(traced)
    monkeypatch.setattr(static_shapes, "split_matmul_outputs", lambda graph: 0)
    return split, OrtProgram(traced)


@pytest.mark.parametrize("bias", [True, False])
def test_gated_mlp_gives_the_split_products_bits(bias, monkeypatch):
    torch.manual_seed(0)
    module = GatedMlp(bias=bias).eval()
    x = torch.randn(2, 7, 24)
    captured = []
    opened = ort.InferenceSession
    monkeypatch.setattr(ort, "InferenceSession",
                        lambda model, *a, **k: (captured.append(model), opened(model, *a, **k))[1])
    split, whole = _programs(module, x, monkeypatch)
    ops = [n.op_type for n in onnx.load_from_string(captured[0]).graph.node]
    assert "Split" not in ops and ops.count("MatMul") == 3   # fc1 as two products, fc2
    with torch.no_grad():
        for shape in [(2, 7, 24), (3, 5, 24)]:   # the pinned session, then the dynamic one
            new = torch.randn(shape)
            assert not torch.equal(split(new), split(torch.randn(shape)))   # the input moves the output
            assert torch.equal(split(new), whole(new))
            torch.testing.assert_close(split(new), module(new), rtol=1e-5, atol=1e-5)


def _graph(*, weight_input=False, read_twice=False, axis=-1, outputs=2, sizes=None, reshape_last=None, bias=True,
           features=8):
    """``x (6, 4) @ W (4, features) [+ b] [-> Reshape (2, 3, last)] -> Split(axis)``."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, features)).astype(np.float32)
    inits = [] if weight_input else [numpy_helper.from_array(weight, "W")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, features]))
    nodes, last = [helper.make_node("MatMul", ["x", "W"], ["p"])], "p"
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(features).astype(np.float32), "b"))
        nodes.append(helper.make_node("Add", ["p", "b"], ["pb"]))
        last = "pb"
    if reshape_last is not None:
        inits.append(numpy_helper.from_array(np.array([2, 3, reshape_last], np.int64), "shape"))
        nodes.append(helper.make_node("Reshape", [last, "shape"], ["r"]))
        last = "r"
    split_inputs = [last]
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        split_inputs.append("sizes")
    pieces = [f"y{i}" for i in range(outputs)]
    attrs = {"axis": axis} if sizes is not None else {"axis": axis, "num_outputs": outputs}
    nodes.append(helper.make_node("Split", split_inputs, pieces, **attrs))
    graph_outputs = pieces + (["p"] if read_twice else [])
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                                   for n in graph_outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    return ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model))


def _run(model, weight_input):
    rng = np.random.default_rng(1)
    feed = {"x": rng.standard_normal((6, 4)).astype(np.float32)}
    if weight_input:
        feed["W"] = rng.standard_normal((4, 8)).astype(np.float32)
    data = ir.serde.serialize_model(model).SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.mark.parametrize("kwargs, replaced", [
    ({}, 1),                                      # a product and its bias, two halves
    ({"bias": False}, 1),                         # no bias
    ({"reshape_last": 8}, 1),                     # the token rows back to (batch, seq, features) between
    ({"sizes": [3, 5]}, 1),                       # pieces of stated sizes
    ({"outputs": 4}, 1),                          # four quarters
    ({"weight_input": True}, 0),                  # the weight is an input, not a constant
    ({"read_twice": True}, 0),                    # the product is read (an output) besides the split
    ({"reshape_last": 8, "axis": 1}, 0),          # split along another axis
    ({"outputs": 3}, 0),                          # uneven pieces (8 in three)
], ids=["bias", "no-bias", "reshape", "sizes", "quarters", "weight-input", "read-twice", "other-axis", "uneven"])
def test_only_a_split_of_a_constant_product_along_its_features_is_replaced(kwargs, replaced):
    model = _graph(**kwargs)
    before = _run(model, kwargs.get("weight_input", False))
    assert split_matmul_outputs(model.graph) == replaced
    after = _run(model, kwargs.get("weight_input", False))
    assert len(after) == len(before)
    for a, b in zip(after, before):
        np.testing.assert_array_equal(a, b)
    if replaced:
        assert not any(n.op_type == "Split" for n in model.graph)
        assert "W" not in model.graph.initializers   # the whole weight is gone: each piece holds its columns
