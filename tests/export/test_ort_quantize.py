"""optimize_for_inference(backend="onnxruntime", quantize="int8"): opt-in dynamic int8 quantization.
The quantized program keeps the signature, answers close to eager (not equal: int8 weights), and
full precision stays the default."""
from __future__ import annotations

import onnx
import pytest
import torch

import tracejit
from workloads import WORKLOADS

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("name", ["transformer_encoder", "bert_tiny"])
def test_int8_is_close_to_eager_on_new_shapes_and_differs_from_fp32(name):
    fn, example, new_inputs = WORKLOADS[name]()
    with torch.no_grad():
        traced = tracejit.trace(fn, example)
        fp32 = tracejit.optimize_for_inference(traced, backend="onnxruntime")
        int8 = tracejit.optimize_for_inference(traced, backend="onnxruntime", quantize="int8")
        for inputs in new_inputs:
            want, full, low = fn(*inputs), fp32(*inputs), int8(*inputs)
            assert low.shape == want.shape and low.dtype == want.dtype
            assert rel_err(full, want) < 1e-5
            assert 1e-4 < rel_err(low, want) < 0.05, f"{name}: int8 relative error {rel_err(low, want):.2e}"


def test_int8_model_runs_integer_matmuls():
    fn, example, _ = WORKLOADS["transformer_encoder"]()
    with torch.no_grad():
        program = tracejit.optimize_for_inference(tracejit.trace(fn, example), backend="onnxruntime",
                                                  quantize="int8")
    ops = [node.op_type for node in onnx.load_from_string(program.quantized_model).graph.node]
    # 2 layers x (attention in-projection, out-projection, 2 feed-forward linears) hold int8 weights;
    # the attention products (activation x activation) stay fp32 MatMuls
    assert ops.count("MatMulInteger") == 8 and "DynamicQuantizeLinear" in ops
    assert program.quantize == "int8"


def test_full_precision_is_the_default_and_unknown_modes_are_refused():
    fn, example, _ = WORKLOADS["mlp"]()
    with torch.no_grad():
        traced = tracejit.trace(fn, example)
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    assert program.quantize is None and program.quantized_model is None
    with pytest.raises(ValueError, match=r"quantize='int4' is not supported; expected one of \('int8',\)"):
        tracejit.optimize_for_inference(traced, backend="onnxruntime", quantize="int4")
