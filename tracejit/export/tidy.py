"""Small clean-ups of an exported onnx-ir graph that change what onnxruntime can optimize.

torch_lib lowers ``aten::max_pool2d`` to a ``MaxPool`` with both outputs (values and indices),
even where nothing reads the indices. onnxruntime's NCHWc layout transformer leaves such a node
in plain NCHW, so the conv net around it is reordered out of and back into the blocked layout
(ResNet-50: a ReorderOutput + ReorderInput pair after its stem, about 20% slower than the
single-output MaxPool that torch's own ONNX exporter writes). ``drop_unused_pool_indices`` rewrites each such
MaxPool with its values output only.

torch_lib's script functions (``hardtanh``, ``clamp``, ``leaky_relu``, ...) cast their Python-number arguments
with ``CastLike(Constant, x)`` inside the graph, which onnxruntime does not fold: ReLU6 becomes
``Clip(x, CastLike(0), CastLike(6))``, a Clip whose bounds are not initializers, which onnxruntime fuses into
neither its conv nor its blocked layout (MobileNet-V2: 70 CastLike, 1.3x the run time of torch.onnx's file).
``fold_constants`` runs onnxscript's constant folding (the pass torch.onnx's own exporter runs on torch_lib's
output): nodes whose inputs are all constants are computed once at export (on inputs of at most
``FOLD_INPUT_LIMIT`` elements); the nodes folding leaves unread are removed. Nodes the lowering left unread
stay as they were (a guard's size reads carry its source line in ``doc_strings=True`` exports; on another input
size such a read may fail as eager's would). onnxruntime does NOT drop them when it loads the model: BERT's
pooler (``Gather -> Gemm -> Tanh``), computed by the traced model but not returned, ran on every call as a
FusedGemm whose output nothing reads. The model with the input sizes fixed (static_shapes.py), whose sizes are
the traced ones, drops them (``drop_unread``): ONNX operators have no side effects, and at the traced sizes
those nodes computed without error in the trace.
"""
from __future__ import annotations

import numpy as np

FOLD_INPUT_LIMIT = 8192   # onnxscript's default: weights are never folded (nor copied) at export
FOLD_OUTPUT_LIMIT = 512 * 512


def fold_constants(model, *, drop_unread: bool = False) -> None:
    """Fold the constant subgraphs of ``model`` (an onnx-ir Model, changed in place), then remove the nodes
    that folding left unread (those unread before stay, unless ``drop_unread``: every node no output depends on
    goes, for a model whose input sizes are fixed: static_shapes.py)."""
    from onnxscript.optimizer import _constant_folding as folding   # optional dependency (onnx export)
    graph = model.graph
    unread_before = set() if drop_unread else {id(node) for node in graph} - _read_nodes(graph)
    with np.errstate(all="ignore"):   # log(0) = -inf in T5's position buckets: what the runtime computes, silently
        folding.FoldConstantsPass(shape_inference=True, input_size_limit=FOLD_INPUT_LIMIT,
                                  output_size_limit=FOLD_OUTPUT_LIMIT)(model)
    drop_unread_nodes(graph, keep=unread_before)


def drop_unread_nodes(graph, keep=frozenset()) -> None:
    """Remove from ``graph`` (an onnx-ir Graph, changed in place) each node no graph output depends on, except
    those whose ids are in ``keep``; a node whose value a subgraph still reads stays."""
    read = _read_nodes(graph)
    for node in reversed(list(graph)):
        if id(node) not in read and id(node) not in keep and not any(v.uses() for v in node.outputs):
            graph.remove(node, safe=True)


def _read_nodes(graph) -> set:
    """ids of the nodes a graph output depends on."""
    read, todo = set(), [v.producer() for v in graph.outputs]
    while todo:
        node = todo.pop()
        if node is None or id(node) in read:
            continue
        read.add(id(node))
        todo.extend(v.producer() for v in node.inputs if v is not None)
    return read


def drop_unused_pool_indices(graph) -> int:
    """Replace each ``MaxPool`` whose indices output is unused by a one-output MaxPool; returns
    how many were replaced. ``graph`` is an onnx-ir Graph, changed in place."""
    import onnx_ir as ir   # optional dependency (the onnx extra); tidy.py is imported without it
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
