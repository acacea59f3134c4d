"""Opt-in lower precision for the onnxruntime backend: onnxruntime's dynamic int8 quantization.

``quantize_model(proto, "int8")`` first lets onnxruntime fold constants (its basic graph
optimizations, written out as a model: a weight reached through a Transpose becomes a plain
initializer), then quantizes the weights of the MatMul nodes to int8 (symmetric, per tensor, 7-bit
range), their activations quantized per call (``onnxruntime.quantization.quantize_dynamic``:
DynamicQuantizeLinear + MatMulInteger). Conv and Gemm stay fp32 (onnxruntime's dynamic
quantization has no Gemm; its ConvInteger is slower than fp32 Conv on CPU). Answers differ from
fp32 (bench/RESULTS.md measures by how much); never the default.

The 7-bit weight range (``reduce_range``): without VNNI (AVX2 machines like the bench's) the u8 x s8
kernel adds pairs of products in 16 bits, which saturate with full-range weights; measured on the
bench TransformerEncoder, relative error against fp32 eager 14% with 8-bit weights, 1% with 7-bit.
A quantized file may run on another machine than the one it was made on, so it is always used.
"""
from __future__ import annotations

import logging
import os
import tempfile

from ._deps import require

QUANTIZE_MODES = ("int8",)


def quantize_model(proto, mode: str) -> bytes:
    """The serialized ``proto`` quantized as ``mode`` (one of QUANTIZE_MODES)."""
    if mode not in QUANTIZE_MODES:
        raise ValueError(f"optimize_for_inference: quantize={mode!r} is not supported; expected one of "
                         f"{QUANTIZE_MODES} or None (full precision)")
    ort = require("onnxruntime")
    from onnxruntime.quantization import QuantType, quantize_dynamic   # optional dependency (the onnx extra)
    with tempfile.TemporaryDirectory() as tmp:
        folded, quantized = os.path.join(tmp, "folded.onnx"), os.path.join(tmp, "int8.onnx")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = folded
        ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        model = require("onnx").load(folded)
        del model.graph.value_info[:]   # quantize_dynamic infers shapes again; stale entries conflict with it
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)   # quantize_dynamic's "consider pre-processing" warning: done above
        try:
            quantize_dynamic(model, quantized, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8,
                             reduce_range=True)
        finally:
            root.setLevel(level)
        with open(quantized, "rb") as f:
            return f.read()
