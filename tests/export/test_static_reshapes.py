"""Reshapes in the onnxruntime backend's model of the traced sizes (export/reshape_chains.py): ``allowzero`` only where
the target has a 0, so that onnxruntime merges the reshapes it writes around fused matmuls with ours."""
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
from tracejit.export.reshape_chains import drop_needless_allowzero

ir = pytest.importorskip("onnx_ir")
pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _reshape_model(target, *, constant=True):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    inputs, inits = [x], []
    if constant:
        inits.append(helper.make_tensor("t", TensorProto.INT64, [len(target)], target))
    else:
        inputs.append(helper.make_tensor_value_info("t", TensorProto.INT64, [len(target)]))
    node = helper.make_node("Reshape", ["x", "t"], ["y"], allowzero=1)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


@pytest.mark.parametrize("target, constant, cleared", [
    ([3, 2], True, 1),      # no 0: allowzero changes nothing
    ([0, 6], True, 0),      # a 0 is a size there (an empty tensor), never "copy the input's dim"
    ([3, 2], False, 0),     # a target computed in the model: unknown
], ids=["no-zero", "zero", "computed"])
def test_allowzero_is_cleared_only_where_it_changes_nothing(target, constant, cleared):
    model = _reshape_model(target, constant=constant)
    assert drop_needless_allowzero(model.graph) == cleared
    (node,) = list(model.graph)
    assert node.attributes.get_int("allowzero", 0) == 1 - cleared


class Encoder(nn.Module):
    """torchvision's ViT block: nn.MultiheadAttention (packed projection split by unflatten / select / view), an MLP."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.norm, self.attn = nn.LayerNorm(dim), nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(x)


def test_no_reshape_reads_another_in_the_optimized_model(tmp_path):
    torch.manual_seed(0)
    net = Encoder().eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(net, (torch.randn(1, 9, 32),))
    path = tmp_path / "optimized.onnx"
    program = OrtProgram(traced, optimized_model_path=path, threads=1)
    model = onnx.load(str(path))
    producer = {o: n for n in model.graph.node for o in n.output}
    pairs = [(producer[n.input[0]].name, n.name) for n in model.graph.node
             if n.op_type == "Reshape" and n.input[0] in producer and producer[n.input[0]].op_type == "Reshape"]
    assert not pairs, pairs
    for shape in [(1, 9, 32), (3, 5, 32), (1, 9, 32)]:   # pinned, dynamic, pinned
        x = torch.randn(shape)
        with torch.no_grad():
            np.testing.assert_allclose(program(x).numpy(), net(x).numpy(), rtol=1e-4, atol=1e-5)
