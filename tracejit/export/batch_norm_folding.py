"""A ``BatchNormalization`` (inference form) after a ``Conv`` folded into the conv's weight and bias at export.

An eval-mode ``nn.BatchNorm2d`` after a conv is exported as its own node (special_ops.batch_norm): ResNet-50's
53 of them in RetinaNet's file. onnxruntime folds each into its conv when it opens the session (in float32), and
other runtimes may or may not; torch.onnx's exporter folds them in the file. ``fold_batch_norms`` does what
torch.onnx does, in float64: for a norm with scale ``g``, shift ``b``, statistics ``m`` and ``v`` and epsilon
``e`` reading a conv ``W * x + c``,

    s = g / sqrt(v + e);   W' = W * s (per output channel);   c' = (c - m) * s + b

rounded once to the weight's dtype. Folded only where the result is the same computation on every input: the
conv's output has no reader but the norm (nor is a graph output), the conv's weight (and bias) and the norm's four
parameters are constants (initializers), the norm has its one inference output, and the dtype is float32 or
float64 (float16 / bfloat16 weights keep the norm: their rounding is eager's). The folded weight and bias are new
initializers (``<weight>.bn_folded``: a weight another node also reads is left as it is); those no node reads
any more are removed.
"""
from __future__ import annotations

import numpy as np

from ._deps import require
from .tidy import constant_array

_FOLDED_DTYPES = (np.float32, np.float64)


def fold_batch_norms(graph) -> int:
    """Fold each foldable Conv -> BatchNormalization pair of ``graph`` (an onnx-ir Graph, changed in place; its
    subgraphs are not visited); returns how many."""
    ir = require("onnx_ir")
    folded, replaced = 0, []
    for node in list(graph):
        parts = _foldable(node)
        if parts is None:
            continue
        conv, weight, bias, (scale, shift, mean, var), eps = parts
        replaced += [v for v in (*conv.inputs[1:], *node.inputs[1:]) if v is not None]
        factor = scale / np.sqrt(var + eps)
        new_weight = weight.astype(np.float64) * factor.reshape((-1,) + (1,) * (weight.ndim - 1))
        new_bias = (bias.astype(np.float64) - mean) * factor + shift if bias is not None else shift - mean * factor
        dtype = weight.dtype
        w_value = _initializer(ir, graph, f"{conv.inputs[1].name}.bn_folded", new_weight.astype(dtype))
        b_value = _initializer(ir, graph, f"{conv.inputs[1].name}.bn_folded_bias", new_bias.astype(dtype))
        fused = ir.Node(conv.domain, "Conv", [conv.inputs[0], w_value, b_value], list(conv.attributes.values()),
                        num_outputs=1, version=conv.version, name=conv.name)
        out = node.outputs[0]
        name = out.name
        fused.outputs[0].shape, fused.outputs[0].type = out.shape, out.type
        fused.doc_string = "\n".join(d for d in (conv.doc_string, node.doc_string) if d) or None   # doc_strings=True
        graph.insert_before(conv, fused)
        out.replace_all_uses_with(fused.outputs[0], replace_graph_outputs=True)
        graph.remove(node, safe=True)
        graph.remove(conv, safe=True)
        fused.outputs[0].name = name
        folded += 1
    _drop_unread_initializers(graph, replaced)
    return folded


def _foldable(node):
    """(conv, weight, bias or None, (scale, shift, mean, var) as float64, epsilon) where ``node`` is a norm that
    folds into the conv it reads, else None."""
    if node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return None
    training = node.attributes.get("training_mode")
    if training is not None and training.value:
        return None
    x = node.inputs[0]
    conv = x.producer() if x is not None else None
    if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or len(conv.outputs) != 1:
        return None
    if len(x.uses()) != 1 or x.is_graph_output() or len(conv.inputs) < 2:
        return None
    weight = constant_array(conv.inputs[1])
    bias = constant_array(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] is not None else None
    params = [constant_array(v) if v is not None else None for v in node.inputs[1:5]]
    if weight is None or weight.dtype.type not in _FOLDED_DTYPES or any(p is None for p in params) or (
            len(conv.inputs) > 2 and conv.inputs[2] is not None and bias is None):
        return None
    channels = weight.shape[0]
    arrays = [p for p in params] + ([bias] if bias is not None else [])
    if any(a.dtype != weight.dtype or a.shape != (channels,) for a in arrays):
        return None
    eps = node.attributes.get("epsilon")
    return conv, weight, bias, tuple(p.astype(np.float64) for p in params), 1e-5 if eps is None else float(eps.value)


def _initializer(ir, graph, base: str, array):
    name, k = base, 1
    while name in graph.initializers:
        name, k = f"{base}_{k}", k + 1
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    value.shape, value.type = ir.Shape(list(array.shape)), ir.TensorType(ir.DataType.from_numpy(array.dtype))
    graph.register_initializer(value)
    return value


def _drop_unread_initializers(graph, values) -> None:
    """Remove the initializers among ``values`` that no node reads any more."""
    for value in values:
        name = value.name
        if graph.initializers.get(name) is value and not value.uses() and not value.is_graph_input() \
                and not value.is_graph_output():
            del graph.initializers[name]
