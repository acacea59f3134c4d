"""A torch_lib sequence (``SplitToSequence``: split, split_with_sizes, unbind, chunk) unpacked into the
trace's outputs.

``SequenceAt`` on each item is right in ONNX, but onnxruntime plans the item's buffer from the sequence's
element shape, which shape inference takes from one piece: pieces of other sizes (Faster R-CNN's per-level
anchors, split 60 / 135) fail at run time ("Shape mismatch attempting to re-use buffer"). A split by
explicit 1-D sizes, or into pieces of one (unbind), is a plain ``Split`` with one output per piece;
any other sequence keeps ``SequenceAt``.
"""
from __future__ import annotations

from ._deps import require

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402


def unpack(builder, seq, count: int) -> list:
    """``count`` values: the pieces of the sequence ``seq``."""
    producer = seq.producer()
    if producer is None or producer.op_type != "SplitToSequence":
        return [op.SequenceAt(seq, i) for i in range(count)]
    attrs = producer.attributes
    axis = attrs["axis"].value if "axis" in attrs else 0
    x = producer.inputs[0]
    if len(producer.inputs) > 1 and producer.inputs[1] is not None:
        sizes = producer.inputs[1]
        if sizes.shape is None or len(sizes.shape) != 1:   # a scalar piece size: the last piece may be smaller
            return [op.SequenceAt(seq, i) for i in range(count)]
        parts = builder.call_op("Split", [x, sizes], {"axis": axis}, version=18, outputs=count)
        return list(parts) if count > 1 else [parts]
    parts = builder.call_op("Split", [x], {"axis": axis, "num_outputs": count}, version=18, outputs=count)
    parts = list(parts) if count > 1 else [parts]
    keepdims = attrs["keepdims"].value if "keepdims" in attrs else 1
    if not keepdims:   # unbind: the pieces lose the axis
        axes = op.Constant(value=ir.tensor([axis], dtype=ir.DataType.INT64))
        parts = [op.Squeeze(p, axes) for p in parts]
    return parts
