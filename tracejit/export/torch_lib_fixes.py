"""ONNX for ops whose torch_lib conversion fails, or is right at the traced sizes only.

Found by tracing models outside the zoo at batch 1 and running their ONNX models at batch 2
(bench/serve_corpus19.py):

- ``repeat_interleave(x, n, dim)`` with ``n`` a traced size (GCViT's ``q_global.repeat_interleave(B //
  q_global.shape[0], dim=0)``): torch_lib puts a dynamic count one axis too early in the ``Expand``
  shape, which only works while the repeated axis has size 1 (batch 1); the ONNX model then failed with
  "invalid expand shape" at batch 2. Here the count goes after ``dim`` (as torch_lib does for a
  Python int), and the result's shape is computed, not left to a ``-1`` (a zero count gives eager's
  empty result where other axes are empty too).
- ``linspace``: torch_lib's compares two ONNX values with Python's ``<`` and fails for every call
  (torchvision's RAFT: ``torch.linspace(-radius, radius, 2 * radius + 1)``). Numbers for both ends (the
  usual case) make a constant computed by torch itself (eager's bits); traced ends or a traced number of
  steps (``torch.linspace(-1, 1, x.shape[-1])``) use torch's CPU formula, ``start + step * i`` for the
  first half and ``end - step * (steps - 1 - i)`` for the rest, in the output's float type (double for
  integer outputs, from the truncated ends), one step giving ``start``.
- ``pad(x, p, mode="circular")`` (``Conv1d(padding_mode="circular")``: Informer's distilling conv): torch_lib writes
  ``Pad`` with ``mode="wrap"``, which ONNX has only from opset 19 (the model is opset 18): onnxruntime ran it,
  OpenVINO's converter lost the rank ("Conv ... rank().is_static() failed"). Here each padded axis is the
  ``Concat`` of its last ``left`` slices, the tensor and its first ``right`` slices (eager's wrap); a negative pad
  (a crop) or a traced pad keeps torch_lib's form.
"""
from __future__ import annotations

import torch

from ._deps import require
from .dtypes import onnx_dtype
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


@handles("aten::linspace.default")
def linspace(cx, node, args, kwargs):
    start, end, steps = args[0], args[1], args[2]
    dtype = node.outputs[0].type.dtype
    if not any(isinstance(v, ir.Value) for v in (start, end, steps)):
        return [op.Constant(value=ir.tensor(torch.linspace(start, end, steps, dtype=dtype).numpy()))]
    out = onnx_dtype(dtype)
    compute = out if dtype.is_floating_point else ir.DataType.DOUBLE   # torch's step type

    def number(v):   # an end: integer outputs start from the truncated ends, as torch's
        v = v if isinstance(v, ir.Value) else cx.builder._get_or_create_constant(v, compute)
        return op.Cast(op.Cast(v, to=out) if not dtype.is_floating_point else v, to=compute)
    start, end = number(start), number(end)
    n = (op.Cast(steps, to=ir.DataType.INT64) if isinstance(steps, ir.Value)
         else cx.builder._get_or_create_constant(steps, ir.DataType.INT64))
    one = cx.builder._get_or_create_constant(1, ir.DataType.INT64)
    i = op.Cast(op.Range(cx.builder._get_or_create_constant(0, ir.DataType.INT64), n, one), to=compute)
    last = op.Cast(op.Sub(n, one), to=compute)
    step = op.Div(op.Sub(end, start), last)
    half = op.Cast(op.Div(n, cx.builder._get_or_create_constant(2, ir.DataType.INT64)), to=compute)
    values = op.Where(op.Less(i, half), op.Add(start, op.Mul(step, i)), op.Sub(end, op.Mul(step, op.Sub(last, i))))
    values = op.Where(op.Equal(n, one), op.Expand(start, op.Reshape(n, op.Constant(value_ints=[1]))), values)
    return [op.Cast(values, to=out)]


@handles("aten::pad.default")
def pad(cx, node, args, kwargs):
    """``pad``: circular with non-negative int pads as slices concatenated (module text); the rest torch_lib's."""
    x, amounts = args[0], args[1]
    mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
    if mode != "circular" or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in amounts):
        return [cx.call_aten("aten::pad.default", list(args), kwargs)]
    rank = len(node.args[0].type.shape)
    for k in range(len(amounts) // 2):   # (left, right) of the last axis first
        axis, left, right = rank - 1 - k, amounts[2 * k], amounts[2 * k + 1]
        parts = [x]
        if left:
            parts.insert(0, op.Slice(x, _ints([-left]), _ints([2 ** 62]), _ints([axis])))
        if right:
            parts.append(op.Slice(x, _ints([0]), _ints([right]), _ints([axis])))
        x = op.Concat(*parts, axis=axis) if len(parts) > 1 else x
    return [x]


def _ints(values):
    return op.Constant(value=ir.tensor(torch.tensor(values, dtype=torch.int64).numpy()))

