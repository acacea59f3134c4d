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

onnxruntime's PadFusion (1.31, every optimization level but none) folds a zero-valued constant ``Pad`` into the
``MaxPool`` that reads it, whose own pads count as -inf, not 0: a window of negative values then answers its
largest value where eager's answer is the padded 0 (transformers' BiT stem, ``ConstantPad2d`` then
``max_pool2d``: 6.7 off at an output scale of 55). The fusion leaves a Pad with an ``axes`` input alone;
``keep_pads_out_of_max_pool`` gives each Pad a MaxPool reads one (every axis: the same padding).

torch_lib's ``aten::index`` and ``slice_scatter`` move the indexed axis to the front and back with a Transpose
whatever the axis, so an index on the first axes gave a Transpose of the identity permutation: onnxruntime copies
its input for each (RetinaNet at batch 8: 360 of its 466 Transposes, 328 of them still in onnxruntime's optimized
graph). ``drop_identity_transposes`` removes them: their readers read the input itself.
"""
from __future__ import annotations

import logging
import threading

import numpy as np

FOLD_INPUT_LIMIT = 8192   # onnxscript's default: weights are never folded (nor copied) at export
FOLD_OUTPUT_LIMIT = 512 * 512


def fold_constants(model, *, drop_unread: bool = False) -> None:
    """Fold the constant subgraphs of ``model`` (an onnx-ir Model, changed in place), then remove the nodes
    that folding left unread (those unread before stay, unless ``drop_unread``: every node no output depends on
    goes, for a model whose input sizes are fixed: static_shapes.py)."""
    from onnxscript.optimizer import _constant_folding as folding   # optional dependency (onnx export)
    graph = model.graph
    # the nodes themselves are held (id -> node), not only their ids: folding frees nodes it replaces, and a node it
    # creates can get a freed one's id; with ids alone that new node was kept though unread (a dead Split +
    # SequenceConstruct in about one export in four after other exports: test_vision_ops_export's split test)
    read = _read_nodes(graph)
    unread_before = {} if drop_unread else {id(node): node for node in graph if id(node) not in read}
    _QUIET.folding = True   # its "Evaluation failed" warnings are a node left unfolded, not the user's concern
    _quiet(logging.getLogger(folding.__name__))
    try:
        with np.errstate(all="ignore"):   # log(0) = -inf in T5's position buckets: what the runtime computes
            folding.FoldConstantsPass(shape_inference=True, input_size_limit=FOLD_INPUT_LIMIT,
                                      output_size_limit=FOLD_OUTPUT_LIMIT)(model)
    finally:
        _QUIET.folding = False
    drop_unread_nodes(graph, keep=unread_before)


_QUIET = threading.local()   # set on the thread while fold_constants runs: onnxscript's warnings are dropped


def _folding_elsewhere(record: logging.LogRecord) -> bool:
    """A logging filter: onnxscript's constant-folding records pass on threads where tracejit is not folding."""
    return not getattr(_QUIET, "folding", False) or record.levelno >= logging.ERROR


def _quiet(logger: logging.Logger) -> None:
    """Give onnxscript's folding logger the filter, once (it keeps its records on every other thread)."""
    if _folding_elsewhere not in logger.filters:
        logger.addFilter(_folding_elsewhere)


def constant_array(value):
    """``value``'s constant contents as a numpy array (an initializer or a ``Constant`` node of an onnx-ir graph),
    or None."""
    if value is None:
        return None
    from onnx_ir.convenience import get_const_tensor   # optional dependency (the onnx extra)
    tensor = get_const_tensor(value)
    return None if tensor is None else np.asarray(tensor.numpy())


def drop_unread_nodes(graph, keep=frozenset()) -> None:
    """Remove from ``graph`` (an onnx-ir Graph, changed in place) each node no graph output depends on, except
    those whose ids are in ``keep`` (a mapping that holds the nodes, so that no id is reused meanwhile); a node
    whose value a subgraph still reads stays."""
    read = _read_nodes(graph)
    for node in reversed(list(graph)):
        if id(node) not in read and id(node) not in keep and not any(v.uses() for v in node.outputs):
            graph.remove(node, safe=True)


def replace_node(graph, node, new, consumed=()) -> None:
    """Put ``new`` (a one-output onnx-ir Node) in ``node``'s place in ``graph``: its output takes the uses, name,
    shape and type of ``node``'s; ``node`` and the ``consumed`` nodes (whose one use was ``node``) are removed."""
    out = node.outputs[0]
    new.outputs[0].shape, new.outputs[0].type = out.shape, out.type
    name = out.name
    graph.insert_before(node, new)
    out.replace_all_uses_with(new.outputs[0], replace_graph_outputs=True)
    graph.remove(node, safe=True)
    for inner in consumed:
        graph.remove(inner, safe=True)
    new.outputs[0].name = name


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


def keep_pads_out_of_max_pool(graph) -> int:
    """Give each ``Pad`` (constant mode) that a ``MaxPool`` reads an explicit ``axes`` input naming every axis, so
    that onnxruntime cannot fold it into the pool (module docstring); returns how many. ``graph`` is an onnx-ir
    Graph, changed in place."""
    import onnx_ir as ir   # optional dependency (the onnx extra); tidy.py is imported without it
    changed = 0
    for node in list(graph):
        if node.op_type != "Pad" or node.domain not in ("", "ai.onnx") or len(node.inputs) > 3:
            continue
        mode = node.attributes.get("mode")
        if (mode is not None and mode.value != "constant") or not any(
                use.op_type == "MaxPool" for use, _ in node.outputs[0].uses()):
            continue
        shape = node.inputs[0].shape
        if shape is None:
            continue
        axes = ir.Value(name=f"{node.name or 'pad'}_tracejit_axes",
                        const_value=ir.tensor(np.arange(len(shape), dtype=np.int64)))
        graph.register_initializer(axes)
        inputs = list(node.inputs) + [None] * (3 - len(node.inputs)) + [axes]
        padded = ir.Node(node.domain, "Pad", inputs, list(node.attributes.values()), num_outputs=1,
                         version=node.version, name=node.name)
        old = node.outputs[0]
        padded.outputs[0].shape, padded.outputs[0].type = old.shape, old.type
        graph.insert_before(node, padded)
        old.replace_all_uses_with(padded.outputs[0], replace_graph_outputs=True)
        graph.remove(node, safe=True)
        padded.outputs[0].name = old.name
        changed += 1
    return changed


def drop_identity_transposes(graph) -> int:
    """Remove each ``Transpose`` whose permutation is the identity (``perm == [0, 1, ..., r-1]``, or no ``perm`` on
    an input of rank 0 or 1: reversing one axis is none); its readers (and a graph output it was) get its input.
    Returns how many. A Transpose that is a graph output of a graph input or initializer, or of another output,
    stays (two outputs, or an output and an input, cannot be one value). ``graph``: an onnx-ir Graph, changed in
    place (its subgraphs are not visited)."""
    dropped = 0
    for node in list(graph):
        if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx") or not _is_identity_transpose(node):
            continue
        source, out = node.inputs[0], node.outputs[0]
        renamed = out.is_graph_output()
        if renamed and (source.producer() is None or source.is_graph_output() or source.is_graph_input()
                        or source.is_initializer()):
            continue
        name = out.name
        out.replace_all_uses_with(source, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        if renamed:
            source.name = name
        dropped += 1
    return dropped


def _is_identity_transpose(node) -> bool:
    perm = node.attributes.get("perm")
    if perm is not None:
        return list(perm.value) == list(range(len(perm.value)))
    shape = node.inputs[0].shape if node.inputs and node.inputs[0] is not None else None
    return shape is not None and len(shape) <= 1
