"""A torch_lib sequence (``SplitToSequence``: split, split_with_sizes, unbind, chunk) unpacked into the
trace's outputs.

``SequenceAt`` on each item is right in ONNX, but onnxruntime plans the item's buffer from the sequence's
element shape, which shape inference takes from one piece: pieces of other sizes (Faster R-CNN's per-level
anchors, split 60 / 135) fail at run time ("Shape mismatch attempting to re-use buffer"). A split by
explicit 1-D sizes, by one piece size (the pieces' sizes computed from the axis' length and the traced count:
OpenVINO cannot read ``SplitToSequence``, CodeGen's ``torch.split(qkv, n, dim=-1)``), or into pieces of one (unbind),
is a plain ``Split`` with one output per piece; any other sequence keeps ``SequenceAt``.
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
        if sizes.shape is None or len(sizes.shape) > 1:
            return [op.SequenceAt(seq, i) for i in range(count)]
        if len(sizes.shape) == 0:   # one piece size: count - 1 pieces of it, the rest last (it may be smaller)
            sizes = _piece_sizes(x, sizes, axis, count)
        parts = builder.call_op("Split", [x, sizes], {"axis": axis}, version=18, outputs=count)
        return list(parts) if count > 1 else [parts]
    parts = builder.call_op("Split", [x], {"axis": axis, "num_outputs": count}, version=18, outputs=count)
    parts = list(parts) if count > 1 else [parts]
    keepdims = attrs["keepdims"].value if "keepdims" in attrs else 1
    if not keepdims:   # unbind: the pieces lose the axis
        axes = op.Constant(value=ir.tensor([axis], dtype=ir.DataType.INT64))
        parts = [op.Squeeze(p, axes) for p in parts]
    return parts


def _piece_sizes(x, size, axis: int, count: int):
    """The 1-D sizes of ``torch.split(x, size, axis)``'s ``count`` pieces (the count the trace saw, which its size
    guards keep): ``size`` repeated ``count - 1`` times, then ``x.shape[axis] - size * (count - 1)``."""
    one = op.Constant(value=ir.tensor([1], dtype=ir.DataType.INT64))
    size = op.Reshape(op.Cast(size, to=ir.DataType.INT64), one)
    rest = op.Sub(op.Shape(x, start=axis, end=axis + 1) if axis >= 0 else op.Gather(op.Shape(x), [axis]),
                  op.Mul(size, op.Constant(value=ir.tensor([count - 1], dtype=ir.DataType.INT64))))
    if count == 1:
        return rest
    return op.Concat(op.Expand(size, op.Constant(value=ir.tensor([count - 1], dtype=ir.DataType.INT64))), rest, axis=0)
