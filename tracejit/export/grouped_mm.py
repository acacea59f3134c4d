"""ONNX for ``aten::_grouped_mm`` (transformers' mixture of experts: Mixtral, Qwen2-MoE), which torch_lib refuses
("Grouped matmul with offsets (ragged/MoE) is not supported").

The form the MoE records, ``[S, K] x [G, K, N] -> [S, N]`` with ``offs`` the cumulative rows per group, is a
``Loop`` over the G groups: iteration g multiplies rows ``offs[g-1]:offs[g]`` (``Slice``) by group g's matrix
(``Gather``) and appends the ``[rows, N]`` piece to a sequence; ``ConcatFromSequence`` puts the pieces back in
row order. That is the grouped product's own work (each row times its own group's matrix: S x K x N
multiply-adds) and ``S x N`` memory, linear in the number of groups. (Before: every row times every group's
matrix, ``[G, S, N]``, then each row's own picked: G times the work and memory.) Rows past ``offs[-1]``, which
the kernel leaves unwritten (a loaded program refuses such offsets before the kernel,
serialize/op_sizes_grouped.py), are multiplied by the last group's matrix so the output keeps its S rows. The
3-d x 3-d form (no offsets) is a batched ``MatMul``. The other forms are refused by name.

With ``export_onnx(..., loop_free=True)`` (the OpenVINO backend: its CPU plugin ran the Loop's sequence with the
wrong number of rows, or corrupted memory, breadth26) the product has no Loop: every row times every group's
matrix (``[S, G, N]``, G times the work) and each row's own group picked with ``GatherElements`` (the group of row
r: how many offsets are <= r, the rows past ``offs[-1]`` the last group's, as above): each row's own product,
nothing summed.
"""
from __future__ import annotations

import numpy as np

from ._deps import require
from .special_ops import handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

INT64 = ir.DataType.INT64


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
    if getattr(cx, "loop_free", False):
        return [_every_group_picked(a, b, offs)]
    zero = op.Constant(value_ints=[0])
    bounds = op.Concat(zero, op.Cast(offs, to=INT64), axis=0)                          # [G + 1]: 0, offs...
    groups = op.Squeeze(op.Shape(b, start=0, end=1), zero)                             # G, 0-d
    pieces = op.Loop(groups, None, op.SequenceEmpty(dtype=a.dtype), body=_group_body(a, b, bounds, a.dtype))
    last = op.Gather(bounds, groups)                                                   # offs[-1]
    tail = op.MatMul(op.Slice(a, op.Unsqueeze(last, zero), op.Shape(a, start=0, end=1), zero),
                     op.Gather(b, op.Sub(groups, op.Constant(value_int=1)), axis=0))   # rows past offs[-1]
    return [op.Concat(op.ConcatFromSequence(pieces, axis=0), tail, axis=0)]


def _every_group_picked(a, b, offs):
    """``[S, N]``: row r of ``a`` times the matrix of its group (how many offsets are <= r, at most G - 1). One 2-d
    ``MatMul`` by the groups' matrices side by side (``[K, G * N]``: OpenVINO's CPU plugin refused the broadcast
    ``[1, S, K] x [G, K, N]`` form, "Can not clone with new dims")."""
    shape_b = op.Shape(b)                                                              # G, K, N
    side_by_side = op.Reshape(op.Transpose(b, perm=[1, 0, 2]),
                              op.Concat(op.Gather(shape_b, op.Constant(value_ints=[1])),
                                        op.Constant(value_ints=[-1]), axis=0))        # [K, G * N]
    every = op.Reshape(op.MatMul(a, side_by_side),
                       op.Concat(op.Constant(value_ints=[0]), op.Gather(shape_b, op.Constant(value_ints=[0, 2])),
                                 axis=0))                                              # [S, G, N]
    rows = op.Range(op.Constant(value=ir.tensor(np.array(0, dtype=np.int64))),
                    op.Squeeze(op.Shape(a, start=0, end=1), op.Constant(value_ints=[0])),
                    op.Constant(value=ir.tensor(np.array(1, dtype=np.int64))))         # [S]
    ends = op.Unsqueeze(op.Cast(offs, to=INT64), op.Constant(value_ints=[0]))          # [1, G]
    passed = op.Cast(op.LessOrEqual(ends, op.Unsqueeze(rows, op.Constant(value_ints=[1]))), to=INT64)   # [S, G]
    last = op.Sub(op.Shape(b, start=0, end=1), op.Constant(value_ints=[1]))            # [1]: G - 1
    group = op.Min(op.ReduceSum(passed, op.Constant(value_ints=[1]), keepdims=0), last)   # [S]
    index = op.Expand(op.Unsqueeze(group, op.Constant(value_ints=[1, 2])),
                      op.Concat(op.Shape(a, start=0, end=1), op.Constant(value_ints=[1]),
                                op.Gather(shape_b, op.Constant(value_ints=[2])), axis=0))   # [S, 1, N]
    picked = op.GatherElements(every, index, axis=1)                                  # [S, 1, N]: each row its own
    return op.Squeeze(picked, op.Constant(value_ints=[1]))


def _group_body(a, b, bounds, dtype):
    """The Loop body: iteration g appends ``a[bounds[g]:bounds[g + 1]] @ b[g]`` to the carried sequence."""
    g = ir.val("group", INT64, ir.Shape([]))
    cond = ir.val("cond_in", ir.DataType.BOOL, ir.Shape([]))
    carried = ir.val("pieces_in", type=ir.SequenceType(ir.TensorType(dtype)))
    nodes = []

    def add(op_type, inputs, **attributes):
        nodes.append(ir.node(op_type, inputs, attributes))
        return nodes[-1].outputs[0]

    one = add("Constant", [], value=ir.tensor(np.array(1, dtype=np.int64)))
    axis0 = add("Constant", [], value=ir.tensor(np.array([0], dtype=np.int64)))
    start = add("Unsqueeze", [add("Gather", [bounds, g]), axis0])
    end = add("Unsqueeze", [add("Gather", [bounds, add("Add", [g, one])]), axis0])
    rows = add("Slice", [a, start, end, axis0])
    piece = add("MatMul", [rows, add("Gather", [b, g], axis=0)])
    pieces = add("SequenceInsert", [carried, piece])
    keep_going = add("Identity", [cond])
    return ir.Graph([g, cond, carried], [keep_going, pieces], nodes=nodes, name="grouped_mm_group")
