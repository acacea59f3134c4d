"""Drop the hidden-row checks of an attention mask made of finite constants, in a model whose sizes are fixed.

export/attention.py computes ``softmax(q @ k^T + max(mask, MASKED)) @ v * visible`` with ``visible = 1`` where a
row of the mask has a value above -inf: eager's zeros for a query that may see no key. Where the mask is built
from finite constants, as T5's is (``where(keep, position_bias, finfo.min)``: the relative position bias and the
padding mask, folded once the sizes are fixed), no value is -inf, so ``max(mask, MASKED)`` is the mask and
``visible`` is 1 everywhere; onnxruntime still runs ``Max``, ``Equal``, ``Not``, ``Cast``, ``ReduceMax`` and a
``Mul`` per attention layer (T5's two encoder and two decoder layers at batch 1: 14 kernels, against none in
torch.onnx's file, whose conversion does not clear hidden rows).

``fold_finite_mask_checks`` replaces each ``Equal(x, ±inf or NaN)`` whose ``x`` is provably finite by a constant
False (then folded by the caller), and each ``Max(x, c)`` with ``x`` provably at or above the constant ``c`` by
``x``; ``drop_multiplications_by_one`` removes each hidden-row factor that folded to ones (a ``Mul`` by a
constant of ones that does not broadcast its other operand; not other such ``Mul``: T5's layer norms of weight
one stay, or onnxruntime no longer fuses them). Every rewrite is exact: ``x * 1.0`` is ``x`` in IEEE arithmetic. "Provably finite" covers
constants, ``Where`` of such values and the reshapes / expands of one (``_bounds``); anything else is not
rewritten.
"""
from __future__ import annotations

import math

import numpy as np

from .reshape_chains import free_name
from .tidy import constant_array

_PASS_THROUGH = ("Reshape", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Identity")


def fold_finite_mask_checks(graph) -> list:
    """Rewrite the ``Equal`` / ``Max`` nodes of ``graph`` (an onnx-ir Graph, changed in place) that test a provably
    finite value against -inf / a lower bound it never goes under (module docstring); returns the ``Mul`` nodes
    that read such an ``Equal``'s answer through ``Not`` / ``Cast`` / ``ReduceMax`` (the hidden-row factors, which
    the caller's folding makes constants; ``drop_multiplications_by_one`` then removes those that are ones)."""
    import onnx_ir as ir   # optional dependency (the onnx extra)
    factors = [node for node in graph if _constant_factor_of_attention(node)]   # a mask that was constant already
    for node in list(graph):
        if node.domain not in ("", "ai.onnx") or len(node.inputs) != 2 or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        if out.is_graph_output() or out.shape is None or not out.shape.is_static():
            continue
        if node.op_type == "Equal":
            x, c = _operand_and_scalar(node)
            if x is None or math.isfinite(c) or _bounds(x) is None:
                continue
            factors.extend(_factors_reading(out))
            false = ir.Value(name=free_name(graph, f"{out.name}_never"), shape=ir.Shape(list(out.shape)),
                             type=ir.TensorType(ir.DataType.BOOL),
                             const_value=ir.tensor(np.zeros([int(d) for d in out.shape], dtype=bool)))
            graph.register_initializer(false)
            out.replace_all_uses_with(false)
        elif node.op_type == "Max":
            x, c = _operand_and_scalar(node)
            bounds = _bounds(x) if x is not None else None
            if (bounds is None or not bounds[0] >= c or x.shape is None
                    or tuple(x.shape) != tuple(out.shape) or x.dtype != out.dtype):
                continue
            out.replace_all_uses_with(x)
        else:
            continue
        graph.remove(node, safe=True)
    return factors


def drop_multiplications_by_one(muls) -> int:
    """Remove each of the ``Mul`` nodes ``muls`` (onnx-ir nodes, from ``fold_finite_mask_checks``) that multiplies by
    a constant of ones and whose output has its other operand's shape and dtype (not a graph output); returns how
    many. Only those: a layer norm's weight of ones stays, or onnxruntime no longer fuses the norm."""
    dropped = 0
    for node in muls:
        graph = node.graph
        if graph is None:   # removed meanwhile
            continue
        out = node.outputs[0]
        for x, one in (node.inputs, reversed(node.inputs)):
            ones = constant_array(one)
            if (ones is None or x is None or ones.size == 0 or not np.all(ones == 1) or out.is_graph_output()
                    or x.shape is None or out.shape is None or not x.shape.is_static()
                    or tuple(x.shape) != tuple(out.shape) or x.dtype != out.dtype):
                continue
            out.replace_all_uses_with(x)
            graph.remove(node, safe=True)
            dropped += 1
            break
    return dropped


def _constant_factor_of_attention(node) -> bool:
    """Is ``node`` attention.py's ``Mul(MatMul(Softmax(...), v), visible)`` with a constant ``visible``?"""
    if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return False
    for x, factor in (node.inputs, reversed(node.inputs)):
        matmul = x.producer() if x is not None else None
        if (matmul is None or matmul.op_type != "MatMul" or constant_array(factor) is None
                or matmul.inputs[0] is None or matmul.inputs[0].producer() is None):
            continue
        if matmul.inputs[0].producer().op_type == "Softmax":
            return True
    return False


def _factors_reading(value, depth: int = 4) -> list:
    """The ``Mul`` nodes reading ``value`` through at most ``depth`` of ``Not`` / ``Cast`` / ``ReduceMax``."""
    found = []
    for use in value.uses():
        node = use.node
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Mul" and len(node.inputs) == 2:
            found.append(node)
        elif node.op_type in ("Not", "Cast", "ReduceMax") and use.idx == 0 and depth > 0:
            found.extend(_factors_reading(node.outputs[0], depth - 1))
    return found


def _operand_and_scalar(node):
    """(the non-constant operand, the other's one float value) of a two-input node, or (None, nan)."""
    for x, c in (node.inputs, reversed(node.inputs)):
        value = constant_array(c)
        if value is not None and value.size == 1 and x is not None and constant_array(x) is None:
            return x, float(value.reshape(-1)[0])
    return None, math.nan


def _bounds(value, depth: int = 8):
    """(lowest, highest) of every element ``value`` can hold, both finite, or None where not provable."""
    const = constant_array(value)
    if const is not None:
        if const.size == 0 or not np.issubdtype(const.dtype, np.floating) and not np.issubdtype(const.dtype,
                                                                                               np.integer):
            return None
        lo, hi = float(const.min()), float(const.max())
        return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None
    node = value.producer() if depth > 0 else None
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Where" and len(node.inputs) == 3:
        a, b = _bounds(node.inputs[1], depth - 1), _bounds(node.inputs[2], depth - 1)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if node.op_type in _PASS_THROUGH and node.inputs and node.inputs[0] is not None:
        return _bounds(node.inputs[0], depth - 1)
    return None

