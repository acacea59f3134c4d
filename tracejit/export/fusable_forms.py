"""ONNX forms of ``rsqrt`` and ``gelu`` that onnxruntime's fusions recognise (the forms torch.onnx writes).

torch_lib writes ``rsqrt(x)`` as ``Reciprocal(Sqrt(x))`` and ``gelu(x)`` as ``x * (0.5 * (1 + erf(x / sqrt 2)))``;
onnxruntime's SimplifiedLayerNormalization fusion looks for ``Div(1, Sqrt(...))`` (RMSNorm: LLaMA, T5, Mistral,
Qwen2) and its Gelu fusion for ``(x * (1 + erf(x / sqrt 2))) * 0.5``, so those models ran their norms and
activations as 5-7 separate nodes each (T5-small: 1.3x torch.onnx's run time). ``gelu(x, approximate="tanh")``
(timm's MaxViT, transformers' ``gelu_pytorch_tanh``) is written in the order its FastGelu fusion matches
(onnxruntime's fast_gelu_fusion.cc, second formula): 45 GELUs of 8 nodes each ran apart in timm's MaxViT-T. Same math: ``1 / sqrt(x)``
is ``Reciprocal(Sqrt(x))`` bit for bit; the gelu products are reassociated (fp32 rounding).
"""
from __future__ import annotations

import math

from ._deps import require
from .special_ops import constant_like, handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402


@handles("aten::rsqrt.default")
def rsqrt(cx, node, args, kwargs):
    x = args[0]
    if x.dtype is None or not x.dtype.is_floating_point():
        return cx.call_aten("aten::rsqrt", args, kwargs)   # torch_lib's conversion (an integer input)
    return [op.Div(constant_like(cx, 1.0, x), op.Sqrt(x))]


@handles("aten::gelu.default")
def gelu(cx, node, args, kwargs):
    x = args[0]
    approximate = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
    if approximate not in ("none", "tanh") or x.dtype is None or not x.dtype.is_floating_point():
        return cx.call_aten("aten::gelu", args, kwargs)
    one, half = constant_like(cx, 1.0, x), constant_like(cx, 0.5, x)
    if approximate == "tanh":   # onnxruntime's FastGelu fusion: 0.5x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
        cube = op.Mul(op.Pow(x, constant_like(cx, 3.0, x)), constant_like(cx, 0.044715, x))
        inner = op.Mul(op.Add(x, cube), constant_like(cx, math.sqrt(2.0 / math.pi), x))
        return [op.Mul(op.Mul(x, half), op.Add(op.Tanh(inner), one))]
    erf = op.Erf(op.Div(x, constant_like(cx, math.sqrt(2.0), x)))
    return [op.Mul(op.Mul(x, op.Add(erf, one)), half)]
