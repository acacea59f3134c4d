"""Every k-th element of a last axis is a row of its transposed reshape in the exported model and in the onnxruntime
backend's model of the traced sizes (export/strided_slices.py): the same bits, on new shapes, and only where the
rewrite holds."""
from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

import tracejit
from tracejit.backends.onnxruntime import OrtProgram
from tracejit.export.static_shapes import with_input_sizes
from tracejit.export.strided_slices import deinterleave_strided_slices
from tracejit.export.tidy import constant_array

ir = pytest.importorskip("onnx_ir")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class PairRotation(nn.Module):
    """timm's EVA ``rot``: each pair of features (a, b) becomes (-b, a), scaled by a table (a rotary embedding)."""

    def __init__(self, features: int = 8):
        super().__init__()
        self.register_buffer("sin", torch.linspace(-1, 1, features))

    def forward(self, x):
        rotated = torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)
        return x * 0.5 + rotated * self.sin


class EveryThird(nn.Module):
    def forward(self, x):
        return x[..., 2::3] * 2 + x[..., 0::3]


def _exported(module, example) -> onnx.ModelProto:
    traced = tracejit.trace(module, (example,))
    buffer = io.BytesIO()
    tracejit.export_onnx(traced, buffer)
    return onnx.load_from_string(buffer.getvalue())


def _run(model: onnx.ModelProto, x: torch.Tensor) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


def _strided_slices(model: onnx.ModelProto) -> int:
    graph = ir.serde.deserialize_model(model).graph
    return sum(1 for n in graph if n.op_type == "Slice" and len(n.inputs) == 5
               and np.any(constant_array(n.inputs[4]) != 1))


@pytest.mark.parametrize("module, features", [(PairRotation(8), 8), (EveryThird(), 9)], ids=["pairs", "thirds"])
def test_model_of_the_traced_sizes_gathers_rows_with_eager_bits(module, features):
    """Every input axis of the exported model is dynamic (the feature axis too): its slices stay; the model of the
    traced sizes gathers rows, and both answer eager's bits."""
    model = _exported(module, torch.randn(2, 3, features))
    sizes = {d.dim_param: size for d, size in zip(model.graph.input[0].type.tensor_type.shape.dim, (2, 3, features))}
    fixed = onnx.load_from_string(with_input_sizes(model, sizes).SerializeToString())
    assert (_strided_slices(model), _strided_slices(fixed)) == (2, 0)
    assert any(n.op_type == "Transpose" for n in fixed.graph.node)
    x = torch.randn(2, 3, features)
    assert not torch.equal(module(x), module(torch.randn(2, 3, features)))   # the input moves the output
    np.testing.assert_array_equal(_run(fixed, x), module(x).numpy())
    for shape in [(5, 7, features), (1, 1, features)]:   # the exported model on new shapes
        x = torch.randn(shape)
        np.testing.assert_array_equal(_run(model, x), module(x).numpy())


def test_backend_model_of_the_traced_sizes_answers_eager_bits():
    module = PairRotation(64).eval()
    x = torch.randn(1, 3, 17, 64)
    program = OrtProgram(tracejit.trace(module, (x,)))
    for shape in [(1, 3, 17, 64), (2, 3, 9, 64)]:   # the pinned session, then the dynamic one
        new = torch.randn(shape)
        assert torch.equal(program(new), module(new))


def _slice_model(shape, start, end, step, axis=-1):
    const = lambda name, v: helper.make_tensor(name, TensorProto.INT64, [1], [v])
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "s", "e", "a", "k"], ["y"]), helper.make_node("Neg", ["y"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [const("s", start), const("e", end), const("a", axis), const("k", step)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    return ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model))


@pytest.mark.parametrize("shape, start, end, step, axis, rewritten", [
    ([2, 6], 1, 2**62, 2, -1, 1),          # odd elements of the last axis
    (["n", 6], 0, 6, 3, 1, 1),             # a dynamic axis before it, the end exactly the size
    ([2, 7], 0, 2**62, 2, -1, 0),          # 2 does not divide 7
    ([2, 6], 0, 4, 2, -1, 0),              # stops before the end
    ([2, 6], 2, 2**62, 2, -1, 0),          # starts past the first step
    ([2, 6], -1, -2**62, -1, -1, 0),       # backwards
    ([4, 6], 0, 2**62, 2, 0, 0),           # not the last axis
    ([2, "n"], 0, 2**62, 2, -1, 0),        # the axis's size unknown
], ids=["odd", "dynamic-rows", "not-dividing", "short", "late-start", "backwards", "first-axis", "unknown-size"])
def test_only_a_slice_to_the_end_of_a_known_last_axis_is_rewritten(shape, start, end, step, axis, rewritten):
    model = _slice_model(shape, start, end, step, axis)
    concrete = [d if isinstance(d, int) else 3 for d in shape]
    data = np.arange(np.prod(concrete), dtype=np.float32).reshape(concrete)
    before = _run(ir.serde.serialize_model(model), torch.from_numpy(data))
    assert deinterleave_strided_slices(model.graph) == rewritten
    after = _run(ir.serde.serialize_model(model), torch.from_numpy(data))
    np.testing.assert_array_equal(after, before)
