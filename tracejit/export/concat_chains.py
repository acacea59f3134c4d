"""One ``Concat`` for a concatenation of concatenations along the same axis (static_shapes.py).

Inception-v3's last blocks concatenate two branches and then the result with the others, along the channels:
``torch.cat([branch1x1, torch.cat([a, b], 1), torch.cat([c, d], 1), pool], 1)``. Exported, that is a
``Concat`` reading two others, which onnxruntime runs as three copies (11 -> 15 Concat kernels in Inception-v3,
where torch.onnx's file has the inner ones flattened). A ``Concat`` whose input is the single-use output of
another ``Concat`` along the same axis equals one ``Concat`` of the inner one's inputs in its place: the same
elements in the same order. ``flatten_concats`` rewrites each one.
"""
from __future__ import annotations

from .tidy import replace_node


def flatten_concats(graph) -> int:
    """Replace each ``Concat`` input of ``graph`` (an onnx-ir Graph, changed in place) that is the single-use output
    of another ``Concat`` along the same axis by that one's inputs; returns how many inner concats were removed."""
    import onnx_ir as ir   # optional dependency (the onnx extra)
    removed = 0
    for node in list(graph):
        if not _is_concat(node):
            continue
        axis = node.attributes.get_int("axis", 0)
        inputs, inner_nodes = [], []
        for value in node.inputs:
            inner = value.producer() if value is not None else None
            if (inner is not None and _is_concat(inner) and _same_axis(inner, axis, value) and len(value.uses()) == 1
                    and not value.is_graph_output()):
                inputs.extend(inner.inputs)
                inner_nodes.append(inner)
            else:
                inputs.append(value)
        if not inner_nodes:
            continue
        flat = ir.Node("", "Concat", inputs, [ir.Attr("axis", ir.AttributeType.INT, axis)], num_outputs=1,
                       name=f"{node.name}_flat")
        replace_node(graph, node, flat, inner_nodes)   # each inner concat's one use was this one
        removed += len(inner_nodes)
    return removed


def _is_concat(node) -> bool:
    return node.op_type == "Concat" and node.domain in ("", "ai.onnx") and len(node.outputs) == 1


def _same_axis(inner, axis: int, value) -> bool:
    """Does ``inner`` concatenate along ``axis`` (negative axes read against the rank of its output ``value``)?"""
    inner_axis = inner.attributes.get_int("axis", 0)
    if inner_axis == axis:
        return True
    rank = len(value.shape) if value.shape is not None else None
    return rank is not None and inner_axis % rank == axis % rank
