"""ONNX for ``aten::_grouped_mm`` (transformers' mixture of experts: Mixtral, Qwen2-MoE), which torch_lib refuses
("Grouped matmul with offsets (ragged/MoE) is not supported").

The form the MoE records, ``[S, K] x [G, K, N] -> [S, N]`` with ``offs`` the cumulative rows per group: every
row times every group's matrix (``MatMul`` to ``[G, S, N]``), then each row's own group picked with
``GatherElements``; a row's group is the count of offsets at or before it (``offs`` ends at S: a loaded program
checks that before the kernel, serialize/op_sizes_grouped.py). That is G times the work of the grouped product
and ``G x S x N`` memory, which a tiny MoE affords; the 3-d x 3-d form (no offsets) is a batched ``MatMul``.
The other forms are refused by name.
"""
from __future__ import annotations

from ._deps import require
from .special_ops import handles

require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402


@handles("aten::_grouped_mm.default")
def grouped_mm(cx, node, args, kwargs):
    a, b = args[0], args[1]
    offs = kwargs.get("offs", args[2] if len(args) > 2 else None)
    bias = kwargs.get("bias", args[3] if len(args) > 3 else None)
    ranks = (len(node.args[0].type.shape), len(node.args[1].type.shape))
    if bias is not None or kwargs.get("out_dtype") is not None:
        raise NotImplementedError("_grouped_mm with a bias or an out_dtype")
    if ranks == (3, 3) and offs is None:
        return [op.MatMul(a, b)]
    if ranks != (2, 3) or offs is None:
        raise NotImplementedError(f"_grouped_mm of ranks {ranks} (only [S, K] x [G, K, N] with offsets, and 3-d x 3-d)")
    every = op.MatMul(op.Unsqueeze(a, op.Constant(value_ints=[0])), b)                      # [G, S, N]
    rows = op.Range(op.Constant(value_int=0), op.Squeeze(op.Slice(op.Shape(a), op.Constant(value_ints=[0]),
                                                                  op.Constant(value_ints=[1]))),
                    op.Constant(value_int=1))                                               # [S]
    ends = op.Cast(offs, to=7)                                                              # int64
    group = op.ReduceSum(op.Cast(op.LessOrEqual(op.Unsqueeze(ends, op.Constant(value_ints=[0])),
                                                op.Unsqueeze(rows, op.Constant(value_ints=[1]))), to=7),
                         op.Constant(value_ints=[1]), keepdims=0)                           # [S]: offsets <= row
    last = op.Sub(op.Slice(op.Shape(b), op.Constant(value_ints=[0]), op.Constant(value_ints=[1])),
                  op.Constant(value_ints=[1]))
    group = op.Min(group, op.Squeeze(last))
    index = op.Expand(op.Unsqueeze(group, op.Constant(value_ints=[0, 2])), op.Shape(op.Slice(
        every, op.Constant(value_ints=[0]), op.Constant(value_ints=[1]), op.Constant(value_ints=[0]))))
    return [op.Squeeze(op.GatherElements(every, index, axis=0), op.Constant(value_ints=[0]))]
