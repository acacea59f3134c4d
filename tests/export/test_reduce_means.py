"""A mean exported as ``ReduceSum / count`` (over a dynamic axis) is one ``ReduceMean`` again in the onnxruntime
backend's model of the traced sizes (export/reduce_means.py), and only where the count is the number of elements
summed; the dynamic model keeps the division (an empty axis gives NaN, as eager)."""
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
from tracejit.export.reduce_means import restore_reduce_means

ir = pytest.importorskip("onnx_ir")
pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class SqueezeExcite(nn.Module):
    """MobileNet-V3's gate: a spatial mean, two 1x1 convs, a hard sigmoid scaling the input."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.stem, self.reduce, self.expand = nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(c, 4, 1), nn.Conv2d(4, c, 1)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        gate = self.expand(torch.relu(self.reduce(x.mean((2, 3), keepdim=True))))
        return x * nn.functional.hardsigmoid(gate)


def _trace(m, *example):
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        return tracejit.trace(m, example)


def test_the_pinned_model_means_with_reduce_mean_and_answers_as_eager(tmp_path):
    torch.manual_seed(0)
    net = SqueezeExcite().eval()
    traced = _trace(net, torch.randn(1, 3, 12, 12))
    exported = [n.op_type for n in tracejit.export_onnx(traced).graph.node]
    assert "ReduceSum" in exported and "ReduceMean" not in exported   # the file: every axis dynamic
    path = tmp_path / "optimized.onnx"
    program = OrtProgram(traced, optimized_model_path=path, threads=1)
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert "ReduceMean" in ops and "ReduceSum" not in ops, ops
    for shape in [(1, 3, 12, 12), (2, 3, 7, 9), (1, 3, 12, 12)]:   # pinned, dynamic, pinned again
        x = torch.randn(shape)
        torch.testing.assert_close(program(x), net(x).detach(), rtol=1e-5, atol=1e-6)


def test_a_mean_over_an_axis_empty_in_a_call_is_nan_as_eager():
    def fn(x):
        return x.mean(-1) + 1

    program = tracejit.optimize_for_inference(_trace(fn, torch.randn(2, 5)), backend="onnxruntime")
    torch.testing.assert_close(program(torch.ones(2, 5)), torch.full((2,), 2.0))
    empty = torch.ones(3, 0)
    assert torch.isnan(fn(empty)).all() and torch.isnan(program(empty)).all()


def _model(divisor, *, shape=(1, 4, 6, 6), twice=False):
    """``Div(ReduceSum(x, [2, 3]), divisor)``, its sum also read by an ``Add`` when ``twice``."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3])
    count = helper.make_tensor("count", TensorProto.FLOAT, [], [float(divisor)])
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1),
             helper.make_node("Div", ["s", "count"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if twice:
        nodes.append(helper.make_node("Add", ["s", "s"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              outputs, [axes, count])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    return ir.serde.deserialize_model(model)


@pytest.mark.parametrize("divisor, shape, twice, rewritten", [
    (36, (1, 4, 6, 6), False, 1),       # the number of elements summed: a mean
    (35, (1, 4, 6, 6), False, 0),       # another divisor: a sum divided by it
    (36, (1, 4, 6, 6), True, 0),        # the sum is read elsewhere too
    (36, ("n", 4, 6, 6), False, 1),     # an unknown batch: the reduced sizes are still known
    (36, (1, 4, "h", 6), False, 0),     # a reduced size unknown (maybe 0): the division stays
    (0, (1, 4, 0, 6), False, 0),        # an empty reduced axis: 0 / 0 is NaN, ReduceMean's 0 is not
], ids=["mean", "other-divisor", "sum-read-twice", "dynamic-batch", "dynamic-reduced-axis", "empty-axis"])
def test_only_a_division_by_the_count_becomes_a_mean(divisor, shape, twice, rewritten):
    model = _model(divisor, shape=shape, twice=twice)
    assert restore_reduce_means(model.graph) == rewritten
    ops = [n.op_type for n in model.graph]
    assert ops.count("ReduceMean") == rewritten and ops.count("Div") == 1 - rewritten
    if rewritten:
        ort = pytest.importorskip("onnxruntime")
        session = ort.InferenceSession(ir.serde.serialize_model(model).SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
        (y,) = session.run(None, {"x": x})
        np.testing.assert_allclose(y, x.mean(axis=(2, 3), keepdims=True), rtol=1e-6, atol=1e-7)
