"""One ``Reshape`` for each chain of reshapes in a model whose sizes are all known (static_shapes.py).

torchvision's ``multi_head_attention_forward`` splits its packed projection with ``unflatten -> unsqueeze ->
transpose -> squeeze`` and each head's slice with ``select -> view``: exported, a ``Reshape -> Unsqueeze`` and
``Squeeze -> Reshape`` per projection, which onnxruntime's optimizer leaves as they are (each one more kernel
call; ViT-B/16's two layers at batch 1 ran 8 more nodes than torch.onnx's file). ``Reshape``, ``Squeeze``
and ``Unsqueeze`` only re-read the same row-major elements under another shape, so a chain of them equals one
``Reshape`` of the chain's input to the last one's shape: ``collapse_reshape_chains`` rewrites each link whose
output shape is static and whose input is the single-use output of another such node (not a graph output).
Only for a model whose input sizes are fixed: there the inferred shapes are the ones every call has.

``allowzero`` only says what a 0 in the target means; onnxruntime merges a Reshape with the one it writes around a
fused ``Gemm`` or ``FusedMatMul`` only when neither sets it (ViT-B/16's two layers: 8 Reshape kernels more than
torch.onnx's file, whose targets are constants without it). ``drop_needless_allowzero`` clears it on each Reshape
whose constant target has no 0, where it changes nothing.
"""
from __future__ import annotations

import numpy as np

from .tidy import replace_node

RESHAPES = ("Reshape", "Squeeze", "Unsqueeze")


def collapse_reshape_chains(graph) -> int:
    """Rewrite each reshape link of ``graph`` (an onnx-ir Graph, changed in place) that reads another one's
    single-use output into one ``Reshape`` of the chain's input; returns how many were rewritten."""
    import onnx_ir as ir   # optional dependency (the onnx extra)
    rewritten = 0
    for node in list(graph):
        if not _is_reshape(node):
            continue
        source = node.inputs[0]
        first = source.producer() if source is not None else None
        out = node.outputs[0]
        if (first is None or not _is_reshape(first) or len(source.uses()) != 1 or source.is_graph_output()
                or out.shape is None or not out.shape.is_static() or first.inputs[0] is None):
            continue
        dims = np.array([int(d) for d in out.shape], dtype=np.int64)
        target = ir.Value(name=free_name(graph, f"{out.name}_collapsed_shape"), shape=ir.Shape([len(dims)]),
                          type=ir.TensorType(ir.DataType.INT64), const_value=ir.tensor(dims))
        graph.register_initializer(target)
        # allowzero: a 0 in the target is a size, never "copy the input's dim"; only where there is one (onnxruntime
        # fuses a Reshape with the one it inserts around a Gemm only when neither sets allowzero)
        attrs = [ir.Attr("allowzero", ir.AttributeType.INT, 1)] if 0 in dims else []
        single = ir.Node("", "Reshape", [first.inputs[0], target], attrs, num_outputs=1, name=f"{node.name}_collapsed")
        replace_node(graph, node, single, [first])   # its one use was the link replaced
        rewritten += 1
    return rewritten


def drop_identity_reshapes(graph) -> int:
    """Remove each reshape link of ``graph`` (an onnx-ir Graph, changed in place) whose input already has its static
    output shape (not a graph output): its readers read the input; returns how many."""
    dropped = 0
    for node in list(graph):
        if not _is_reshape(node) or node.inputs[0] is None:
            continue
        source, out = node.inputs[0], node.outputs[0]
        if (out.is_graph_output() or out.shape is None or source.shape is None or not out.shape.is_static()
                or not source.shape.is_static() or tuple(source.shape) != tuple(out.shape)):
            continue
        out.replace_all_uses_with(source)
        graph.remove(node, safe=True)
        dropped += 1
    return dropped


def drop_needless_allowzero(graph) -> int:
    """Clear ``allowzero`` on each Reshape of ``graph`` (an onnx-ir Graph, changed in place) whose target is a
    constant without a 0; returns how many."""
    import onnx_ir as ir   # optional dependency (the onnx extra)
    cleared = 0
    for node in graph:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or not node.attributes.get_int("allowzero", 0):
            continue
        target = ir.convenience.get_const_tensor(node.inputs[1]) if len(node.inputs) > 1 else None
        if target is None or 0 in target.numpy().reshape(-1).tolist():
            continue
        node.attributes.pop("allowzero")
        cleared += 1
    return cleared


def free_name(graph, name: str) -> str:
    """``name``, or ``name`` with a number after it where an initializer of ``graph`` has it (the passes may run
    twice; names are not always unique in the model torch_lib writes)."""
    taken, k, free = graph.initializers, 1, name
    while free in taken:
        free, k = f"{name}_{k}", k + 1
    return free


def _is_reshape(node) -> bool:
    return node.op_type in RESHAPES and node.domain in ("", "ai.onnx") and len(node.outputs) == 1
