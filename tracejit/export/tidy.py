"""Small clean-ups of an exported onnx-ir graph that change what onnxruntime can optimize.

torch_lib lowers ``aten::max_pool2d`` to a ``MaxPool`` with both outputs (values and indices),
even where nothing reads the indices. onnxruntime's NCHWc layout transformer leaves such a node
in plain NCHW, so the conv net around it is reordered out of and back into the blocked layout
(ResNet-50: a ReorderOutput + ReorderInput pair after its stem, about 20% slower than the
single-output MaxPool that torch's own ONNX exporter writes). ``drop_unused_pool_indices`` rewrites each such
MaxPool with its values output only.
"""
from __future__ import annotations


def drop_unused_pool_indices(graph) -> int:
    """Replace each ``MaxPool`` whose indices output is unused by a one-output MaxPool; returns
    how many were replaced. ``graph`` is an onnx-ir Graph, changed in place."""
    import onnx_ir as ir
    replaced = 0
    for node in list(graph):
        if node.op_type != "MaxPool" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 2:
            continue
        values, indices = node.outputs
        if indices.uses() or indices.is_graph_output():
            continue
        single = ir.Node(node.domain, "MaxPool", list(node.inputs), list(node.attributes.values()),
                         num_outputs=1, version=node.version, name=node.name)
        name = values.name
        single.outputs[0].shape, single.outputs[0].type = values.shape, values.type
        graph.insert_before(node, single)
        values.replace_all_uses_with(single.outputs[0], replace_graph_outputs=True)
        graph.remove(node, safe=True)
        single.outputs[0].name = name
        replaced += 1
    return replaced
