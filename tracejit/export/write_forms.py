"""Cheaper ONNX forms of writing a tensor into a slice or a row of another (``slice_scatter``, ``select_scatter``).

An in-place write into a view (``batched[i, :c, :h, :w].copy_(img)``: torchvision's ``batch_images``, once per
image) is written back through the chain of views (view_writes.py): a ``select`` by ``select_scatter``, a ``slice``
by ``slice_scatter``. torch_lib writes ``select_scatter`` as a ``ScatterElements`` whose index tensor is expanded
to the written row's every element, and ``slice_scatter`` as a ``ScatterND`` over the sliced axis moved to the
front, between two Transposes (the identity permutation for axis 0). onnxruntime scatters element by element:
RetinaNet's ``batch_images`` of 96x96 images spent 1.5 ms an image in ScatterElements alone (3% of the model's
run at batch 8, more than the rest of the write-back and of what torch.onnx's file spends there).

Here:

- ``select_scatter(x, row, dim=0, index)`` with a Python int ``index`` is ``ScatterND(x, [[index]], row[None])``:
  one block copy. onnxruntime's ScatterND takes an index in ``[-n, n)`` and fails the run for any other, as eager
  raises (a select outside the tensor). Other axes and traced indices keep torch_lib's form.
- ``slice_scatter(x, src, dim, start, end, 1)`` with ``start`` a Python int >= 0 (or None) is
  ``Concat(x[:start], src, x[start + len(src):])`` along ``dim``: copies only. ``src`` has the slice's shape (the
  view's, which eager clamps to the tensor like ONNX's Slice), so the pieces add up to ``x``'s size, whatever
  ``end`` is (a traced one too). A negative or traced start and steps other than 1 keep torch_lib's form.
"""
from __future__ import annotations

from ._deps import require
from .special_ops import handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

INT64_MAX = 2 ** 63 - 1


def _int64(values):
    return op.Constant(value=ir.tensor(list(values), dtype=ir.DataType.INT64))


def _python_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def select_scatter(cx, x, row, dim, index, rank: int):
    """``x`` with ``row`` written at ``index`` along ``dim`` (``rank``: ``x``'s rank)."""
    if rank >= 1 and _python_int(dim) and dim % rank == 0 and _python_int(index):
        indices = op.Constant(value=ir.tensor([[index]], dtype=ir.DataType.INT64))
        return op.ScatterND(x, indices, op.Unsqueeze(row, _int64([0])))
    return cx.call_aten("aten::select_scatter.default", [x, row, dim, index])


def slice_scatter(cx, x, src, dim, start, end, step, rank: int):
    """``x`` with ``src`` written into ``x[start:end:step]`` along ``dim`` (``rank``: ``x``'s rank)."""
    start = 0 if start is None else start
    if not (rank >= 1 and _python_int(dim) and _python_int(start) and start >= 0 and step in (None, 1)):
        return cx.call_aten("aten::slice_scatter.default", [x, src, dim, start, end, 1 if step is None else step])
    axis = dim % rank
    axes = _int64([axis])
    after_start = op.Add(_int64([start]), op.Shape(src, start=axis, end=axis + 1))
    pieces = [op.Slice(x, _int64([0]), _int64([start]), axes)] if start > 0 else []
    pieces += [src, op.Slice(x, after_start, _int64([INT64_MAX]), axes)]
    return op.Concat(*pieces, axis=axis)


@handles("aten::select_scatter.default", "aten::select_scatter")
def select_scatter_op(cx, node, args, kwargs):
    """``torch.select_scatter(x, row, dim, index)`` called by the program itself."""
    x, row, dim, index = args[:4]
    return [select_scatter(cx, x, row, dim, index, len(node.args[0].type.shape))]


@handles("aten::slice_scatter.default", "aten::slice_scatter")
def slice_scatter_op(cx, node, args, kwargs):
    """``torch.slice_scatter(x, src, dim, start, end, step)`` called by the program itself."""
    x, src, dim, start, end, step = args[:6]   # schema order, defaults filled in (schema_args.bind)
    return [slice_scatter(cx, x, src, dim, start, end, step, len(node.args[0].type.shape))]
