"""tracejit.export.triton.write_repository: the Triton model repository layout, and config.pbtxt parsed
back with Triton's own ModelConfig schema and compared with the exported model's signature."""
from __future__ import annotations

import doctest
import os

import onnx
import onnxruntime as ort
import pytest
import torch
from google.protobuf import text_format
from torch import nn

import tracejit
import tracejit.export.triton as triton
from tracejit.export import ExportError

try:
    import triton_model_config_pb2 as model_config_pb2   # Triton's schema, generated for protobuf >= 6.33.5
except Exception as e:  # noqa: BLE001  (an older protobuf refuses the generated code with its own error)
    pytest.skip(f"Triton's ModelConfig schema does not load with this protobuf: {e}", allow_module_level=True)

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")
TYPES = {onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.INT64: "TYPE_INT64"}


class TokenTagger(nn.Module):
    """Ids and a mask of shape [batch, sequence]: the sequence length is a dynamic axis besides the batch."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(50, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, input_ids, attention_mask):
        h = self.embed(input_ids) * attention_mask.unsqueeze(-1)
        return self.head(h), h.sum(1)


def trace(model, example):
    with torch.no_grad():
        return tracejit.trace(model, example)


def read_config(model_dir) -> "model_config_pb2.ModelConfig":
    config = model_config_pb2.ModelConfig()
    with open(os.path.join(model_dir, "config.pbtxt")) as f:
        text_format.Parse(f.read(), config)   # Triton's schema: an unknown field or enum value fails here
    return config


def onnx_signature(values):
    return [(v.name, TYPES[v.type.tensor_type.elem_type],
             [d.dim_value if d.HasField("dim_value") else -1 for d in v.type.tensor_type.shape.dim]) for v in values]


def config_signature(tensors):
    return [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in tensors]


def ort_run(path, inputs):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
    return [torch.from_numpy(o) for o in session.run(None, feed)]


def test_layout_and_config_of_a_model_with_a_sequence_axis(tmp_path):
    model = TokenTagger().eval()
    traced = trace(model, (torch.randint(0, 50, (2, 5)), torch.ones(2, 5)))
    written = triton.write_repository(traced, tmp_path, name="tagger")
    model_dir = tmp_path / "tagger"
    assert sorted(os.listdir(tmp_path)) == ["tagger"]
    assert sorted(os.listdir(model_dir)) == ["1", "config.pbtxt"]
    assert os.listdir(model_dir / "1") == ["model.onnx"]

    config = read_config(model_dir)
    assert config.name == "tagger" == written.name
    assert config.backend == "onnxruntime"
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    proto = onnx.load(str(model_dir / "1" / "model.onnx"))
    onnx.checker.check_model(proto, full_check=True)
    # the config is the ONNX model's signature with the batch dim (shared dim 0) left out
    expected_inputs = [(n, t, dims[1:]) for n, t, dims in onnx_signature(proto.graph.input)]
    expected_outputs = [(n, t, dims[1:]) for n, t, dims in onnx_signature(proto.graph.output)]
    assert config_signature(config.input) == expected_inputs
    assert config_signature(config.output) == expected_outputs
    assert config_signature(config.input) == [("input_ids", "TYPE_INT64", [-1]), ("attention_mask", "TYPE_FP32", [-1])]
    assert config_signature(config.output) == [("output_0", "TYPE_FP32", [-1, 3]), ("output_1", "TYPE_FP32", [8])]

    # the model in the repository answers as eager on another batch size and sequence length
    ids, mask = torch.randint(0, 50, (3, 9)), (torch.rand(3, 9) > 0.3).float()
    with torch.no_grad():
        expected = model(ids, mask)
    got = ort_run(str(model_dir / "1" / "model.onnx"), (ids, mask))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(expected[1], model(ids, torch.ones(3, 9))[1])   # the mask moves the output


def test_max_batch_size_zero_keeps_full_shapes_and_no_batching(tmp_path):
    traced = trace(TokenTagger().eval(), (torch.randint(0, 50, (2, 5)), torch.ones(2, 5)))
    triton.write_repository(traced, tmp_path, name="full", max_batch_size=0)
    config = read_config(tmp_path / "full")
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    proto = onnx.load(str(tmp_path / "full" / "1" / "model.onnx"))
    assert config_signature(config.input) == onnx_signature(proto.graph.input)
    assert config_signature(config.input)[0] == ("input_ids", "TYPE_INT64", [-1, -1])
    assert config_signature(config.output) == onnx_signature(proto.graph.output)


def test_a_guard_pinned_dim_is_a_number_and_the_default_name_is_the_traced_name(tmp_path):
    def scale(x):
        return x * 2 if x.size(1) == 4 else x
    traced = trace(scale, (torch.randn(2, 4),))
    written = triton.write_repository(traced, tmp_path)
    assert written.name == "scale"
    config = read_config(tmp_path / "scale")
    assert config_signature(config.input) == [("x", "TYPE_FP32", [4])]
    assert config_signature(config.output) == [("output", "TYPE_FP32", [4])]


def test_no_shared_batch_axis_means_no_batching_and_a_clear_error_when_asked(tmp_path):
    def project(x, w):
        return x @ w
    traced = trace(project, (torch.randn(2, 3), torch.randn(3, 5)))
    assert triton.write_repository(traced, tmp_path, name="p").max_batch_size == 0
    assert config_signature(read_config(tmp_path / "p").input) == [("x", "TYPE_FP32", [-1, -1]),
                                                                    ("w", "TYPE_FP32", [-1, -1])]
    with pytest.raises(ExportError, match=r"max_batch_size=2 needs a batch axis.*use max_batch_size=0"):
        triton.write_repository(traced, tmp_path, name="p2", max_batch_size=2)
    with pytest.raises(ValueError, match="max_batch_size must be an int >= 0; got -1"):
        triton.write_repository(traced, tmp_path, name="p3", max_batch_size=-1)


def test_names_follow_tritons_rules():
    assert triton.model_name("my model/v2") == "my_model_v2"
    assert triton.model_name("../..") == "model"
    assert triton.tensor_name("input ids") == "input_ids"
    assert triton.tensor_name("0x") == "_0x"
    config = triton.ModelConfig('a"b', 0, [triton.TensorConfig("x", "TYPE_BOOL", [2, -1])], [], False)
    parsed = text_format.Parse(triton.config_text(config), model_config_pb2.ModelConfig())
    assert parsed.name == 'a"b' and list(parsed.input[0].dims) == [2, -1]
    assert parsed.input[0].data_type == model_config_pb2.TYPE_BOOL


def test_docstring_example():
    result = doctest.testmod(triton, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_an_output_whose_dim_0_is_another_input_dim_is_no_batch_axis(tmp_path):
    def transpose(x):
        return x.t() * 2
    traced = trace(transpose, (torch.randn(3, 3),))   # a square example: the sizes alone cannot tell
    assert triton.write_repository(traced, tmp_path, name="t").max_batch_size == 0
    assert config_signature(read_config(tmp_path / "t").output) == [("output", "TYPE_FP32", [-1, -1])]


def test_a_non_ascii_argument_name_is_renamed_in_both_config_and_model(tmp_path):
    ns = {}
    exec("def f(größe):\n    return größe * 3\n", ns)
    traced = trace(ns["f"], (torch.randn(2, 3),))
    triton.write_repository(traced, tmp_path, name="u")
    config = read_config(tmp_path / "u")
    proto = onnx.load(str(tmp_path / "u" / "1" / "model.onnx"))
    assert [t.name for t in config.input] == [v.name for v in proto.graph.input] == ["gr__e"]
    x = torch.randn(4, 3)
    (got,) = ort_run(str(tmp_path / "u" / "1" / "model.onnx"), (x,))
    torch.testing.assert_close(got, x * 3)
