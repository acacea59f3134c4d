"""ONNX for ops whose torch_lib conversion is right at the traced sizes and wrong at others.

Found by tracing models outside the zoo at batch 1 and running their ONNX models at batch 2
(bench/serve_corpus19.py):

- ``repeat_interleave(x, n, dim)`` with ``n`` a traced size (GCViT's ``q_global.repeat_interleave(B //
  q_global.shape[0], dim=0)``): torch_lib puts a dynamic count one axis too early in the ``Expand``
  shape, which only works while the repeated axis has size 1 (batch 1); the ONNX model then failed with
  "invalid expand shape" at batch 2. Here the count goes after ``dim`` (as torch_lib does for a
  Python int), and the result's shape is computed, not left to a ``-1`` (a zero count gives eager's
  empty result where other axes are empty too).
"""
from __future__ import annotations

from ._deps import require
from .special_ops import handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402


@handles("aten::repeat_interleave.self_int")
def repeat_interleave_by_count(cx, node, args, kwargs):
    x, repeats = args[0], args[1]
    dim = kwargs.get("dim", args[2] if len(args) > 2 else None)
    if dim is None:   # eager flattens first
        x, rank, dim = op.Reshape(x, op.Constant(value_ints=[-1])), 1, 0
    else:
        rank = len(node.args[0].type.shape)
    dim = dim % rank
    if isinstance(repeats, ir.Value):
        count = op.Reshape(op.Cast(repeats, to=ir.DataType.INT64), op.Constant(value_ints=[1]))
    else:
        count = op.Constant(value_ints=[int(repeats)])
    tiles = op.Concat(op.Constant(value_ints=[1] * (dim + 1)), count,
                      op.Constant(value_ints=[1] * (rank - dim - 1)), axis=0)
    expanded = op.Expand(op.Unsqueeze(x, op.Constant(value_ints=[dim + 1])), tiles)
    size = op.Mul(op.Shape(x, start=dim, end=dim + 1), count)
    shape = op.Concat(op.Shape(x, start=0, end=dim), size, op.Shape(x, start=dim + 1), axis=0)
    return [op.Reshape(expanded, shape)]
