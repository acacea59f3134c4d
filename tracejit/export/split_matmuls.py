"""A linear layer whose output is split along its features as one linear per piece (static_shapes.py).

A gated MLP (timm's ``GluMlp`` / ``SwiGLUPacked`` in EVA02, transformers' fused gate-and-up projections) computes
one linear and splits its features in two: ``a, b = fc1(x).chunk(2, -1)``. Exported, that is ``MatMul`` (+ ``Add``
of the bias) then ``Split`` on the last axis, which copies the whole product once more: onnxruntime's Split of
EVA02-tiny's ``(520, 1024)`` product at batch 8 takes 190 us a layer, 12 a call, about 4% of the model's time.

A split of a product along its columns is the product of the same rows with the weight's columns split:
``split(x @ W + b) == (x @ W[:, :n], ...) + (b[:n], ...)``. Each output element is the same dot product of a row of
``x`` with one column of ``W``, summed in the same order (onnxruntime's MLAS blocks the sum over K the same way
for any number of columns; tests/export/test_split_matmuls.py checks the bits). ``split_matmul_outputs`` writes
one ``MatMul`` (+ ``Add``) per piece where:

- the weight (and bias) is a constant, the bias one value per column;
- the product has no other reader than the split (through at most one ``Reshape`` to a constant shape that keeps
  the last axis: the token rows back to ``(batch, seq, features)``, token_rows.py), and is no graph output;
- the split is along the last axis into pieces of known sizes.

Anything else is left as it is.
"""
from __future__ import annotations

import numpy as np

from .reshape_chains import free_name
from .tidy import constant_array


def split_matmul_outputs(graph) -> int:
    """Replace each ``Split`` of ``graph`` (an onnx-ir Graph, changed in place) of a constant-weight product along
    its features by one product per piece (module docstring); returns how many splits were replaced."""
    import onnx_ir as ir   # optional dependency (the onnx extra)
    replaced = 0
    for split in list(graph):
        found = _split_product(split)
        if found is None:
            continue
        matmul, add, reshape, sizes = found
        rows, weight = matmul.inputs[0], constant_array(matmul.inputs[1])
        bias = constant_array(add.inputs[1]) if add is not None else None
        target = constant_array(reshape.inputs[1]) if reshape is not None else None
        start = 0
        for i, (size, piece) in enumerate(zip(sizes, split.outputs)):
            stop, name = start + size, f"{split.name or 'split'}_piece{i}"
            columns = _initializer(graph, ir, f"{name}_weight", weight[:, start:stop])
            nodes = [ir.Node("", "MatMul", [rows, columns], num_outputs=1, name=f"{name}_matmul")]
            if bias is not None:
                b = _initializer(graph, ir, f"{name}_bias", bias[..., start:stop])
                nodes.append(ir.Node("", "Add", [nodes[-1].outputs[0], b], num_outputs=1, name=f"{name}_bias_add"))
            if target is not None:
                shape = _initializer(graph, ir, f"{name}_shape", np.concatenate([target[:-1], [size]]).astype(np.int64))
                nodes.append(ir.Node("", "Reshape", [nodes[-1].outputs[0], shape], num_outputs=1, name=f"{name}_rows"))
            graph.insert_before(split, nodes)
            out = nodes[-1].outputs[0]
            out.shape, out.type = piece.shape, piece.type
            piece_name = piece.name
            piece.replace_all_uses_with(out, replace_graph_outputs=True)
            out.name = piece_name
            start = stop
        for node in (split, reshape, add, matmul):
            if node is not None:
                constants = list(node.inputs[1:])   # read before the removal detaches them
                graph.remove(node, safe=True)
                _drop_unread_initializers(graph, constants)
        replaced += 1
    return replaced


def _drop_unread_initializers(graph, values) -> None:
    """Remove each of ``values`` that is an initializer nothing reads any more (the whole weight, once split)."""
    for value in values:
        if value is not None and value.is_initializer() and not value.uses() and not value.is_graph_output():
            graph.initializers.pop(value.name, None)


def _initializer(graph, ir, name: str, array):
    value = ir.Value(name=free_name(graph, name), const_value=ir.tensor(np.ascontiguousarray(array)))
    graph.register_initializer(value)
    return value


def _split_product(split):
    """``(matmul, add or None, reshape or None, piece sizes)`` where ``split`` is a Split along the last axis of a
    constant-weight product it alone reads (module docstring); else None."""
    if split.op_type != "Split" or split.domain not in ("", "ai.onnx") or split.inputs[0] is None:
        return None
    value = split.inputs[0]
    shape = value.shape
    if shape is None or len(shape) == 0 or not isinstance(shape[-1], int):
        return None
    axis = split.attributes.get_int("axis", 0)
    if axis % len(shape) != len(shape) - 1:
        return None
    sizes = _piece_sizes(split, shape[-1])
    if sizes is None:
        return None
    node, reshape, add = _sole_producer(value), None, None
    if node is not None and node.op_type == "Reshape" and node.domain in ("", "ai.onnx"):
        target = constant_array(node.inputs[1])
        if target is None or target.ndim != 1 or int(target[-1]) != shape[-1] or not _read_once(node.inputs[0]):
            return None
        reshape, node = node, _sole_producer(node.inputs[0])
    if node is not None and node.op_type == "Add" and node.domain in ("", "ai.onnx"):
        add, bias = node, constant_array(node.inputs[1])
        if bias is None or bias.ndim != 1 or bias.shape[0] != shape[-1] or not _read_once(node.inputs[0]):
            return None
        node = _sole_producer(node.inputs[0])
    if node is None or node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
        return None
    weight = constant_array(node.inputs[1])
    if weight is None or weight.ndim != 2 or weight.shape[1] != shape[-1]:
        return None
    return node, add, reshape, sizes


def _piece_sizes(split, total: int) -> list[int] | None:
    """The sizes of ``split``'s pieces (its ``split`` input, or ``num_outputs`` equal pieces), None when unknown."""
    if "split" in split.attributes:
        return None   # the sizes as an attribute (before opset 13): not what the exporter writes
    if len(split.inputs) > 1 and split.inputs[1] is not None:
        sizes = constant_array(split.inputs[1])
        return None if sizes is None or int(sizes.sum()) != total else [int(s) for s in sizes]
    count = split.attributes.get_int("num_outputs", len(split.outputs))
    if count != len(split.outputs) or total % count:
        return None   # uneven pieces (the last one smaller): left as they are
    return [total // count] * count


def _sole_producer(value):
    """The node making ``value`` where its one reader is the node being matched and it is no graph output."""
    if value is None or not _read_once(value):
        return None
    return value.producer()


def _read_once(value) -> bool:
    return value is not None and len(value.uses()) == 1 and not value.is_graph_output()
