"""Eager's range check on gathered indices, kept by the models of the onnxruntime / OpenVINO backends.

``torch.embedding``, ``index_select`` and ``gather`` raise IndexError for an index outside ``[0, n)``; ``x[i]``
with an index tensor for one outside ``[-n, n)``. Their ONNX forms (Gather, GatherElements, GatherND) do not: a
negative index picks from the end (onnxruntime and OpenVINO), and one past the end fails the run in onnxruntime
but gives zeros in OpenVINO: an answer where eager raises. For indices not computed from constants and sizes
alone, a model exported for a backend (``index_checks``) therefore holds:

* ``"raise"`` (onnxruntime): where negatives are not allowed, each negative index replaced by ``n``, so that
  onnxruntime's gather fails the run for it as for any index past the end (two elementwise nodes, no output);
* ``"report"`` (OpenVINO): one boolean output, ``tracejit_index_ok``, after the guard outputs: every checked
  index tensor's least and greatest value in range.

Either way the backend hands such a call to the traced program (a failed run, or a False output:
backends/onnx_call.py), which raises eager's IndexError. A standalone file has neither (the default): a caller
would have to know.
"""
from __future__ import annotations

import torch

from ._deps import require
from .guards import _constant_only as from_constants_and_sizes
from .special_ops import constant_like, handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

OUTPUT = "tracejit_index_ok"
MODES = ("raise", "report")


@handles("aten::embedding.default", "aten::embedding")
def embedding(cx, node, args, kwargs):
    """torch_lib's Gather, the ids in ``[0, rows)`` as eager checks them."""
    if len(node.args) > 1 and _checked(cx, node.args[1]):
        args = [args[0], _in_range(cx, args[1], _size(args[0], 0), negative_ok=False), *args[2:]]
    return cx.call_aten("aten::embedding", args, kwargs)


@handles("aten::index_select.default", "aten::index_select")
def index_select(cx, node, args, kwargs):
    """``x.index_select(dim, index)``: the index in ``[0, x.size(dim))``."""
    if len(node.args) > 2 and isinstance(args[1], int) and _checked(cx, node.args[2]):
        args = [args[0], args[1], _in_range(cx, args[2], _size(args[0], _dim(node, args[1])), negative_ok=False)]
    return cx.call_aten("aten::index_select", args, kwargs)


@handles("aten::gather.default", "aten::gather")
def gather(cx, node, args, kwargs):
    """``torch.gather(x, dim, index)``: the index in ``[0, x.size(dim))``."""
    if len(node.args) > 2 and isinstance(args[1], int) and _checked(cx, node.args[2]):
        args = [args[0], args[1], _in_range(cx, args[2], _size(args[0], _dim(node, args[1])), negative_ok=False),
                *args[3:]]
    return cx.call_aten("aten::gather", args, kwargs)


@handles("aten::index.Tensor")
def index(cx, node, args, kwargs):
    """``x[i, j]`` with integer index tensors: each in ``[-n, n)`` of its dimension (onnxruntime's GatherND fails a
    run past that itself; OpenVINO's answers zeros: reported)."""
    if getattr(cx, "index_checks", None) == "report" and len(node.args) > 1 and isinstance(node.args[1], (list, tuple)):
        for d, (traced, value) in enumerate(zip(node.args[1], args[1])):
            if traced is not None and not _is_mask(traced) and _checked(cx, traced):
                _in_range(cx, value, _size(args[0], d), negative_ok=True)
    single = _single_index(node)
    if single is not None:   # x[..., i] with one integer index tensor: a Gather along its axis
        return [op.Gather(args[0], args[1][single], axis=single)]
    return cx.call_aten(node.op, args, kwargs)


def _single_index(node) -> int | None:
    """The axis of ``x[:, ..., i]``'s one index tensor where it is the only one and holds integers (not a mask),
    else None. ``Gather(x, i, axis)`` is then torch's answer: ``i``'s dims in the axis' place, an index in
    ``[-n, n)`` counted as eager counts it, one outside failing the run as GatherND's does. torch_lib's general
    form (Transposes moving the indexed axes first and back, the index expanded and stacked for a GatherND) is
    kept for two or more index tensors and for masks."""
    indices = node.args[1] if len(node.args) > 1 and isinstance(node.args[1], (list, tuple)) else ()
    given = [d for d, i in enumerate(indices) if i is not None]
    if len(given) != 1:
        return None
    dtype = getattr(getattr(indices[given[0]], "type", None), "dtype", None)
    return given[0] if dtype in (torch.int64, torch.int32) else None


def _checked(cx, ids) -> bool:
    """Is the range of the traced tensor ``ids`` to be checked (a mode is set; not constants and sizes alone)?"""
    return getattr(cx, "index_checks", None) is not None and ids is not None and not isinstance(ids, (int, float)) \
        and not from_constants_and_sizes([ids], {}, sizes=True)


def _is_mask(traced) -> bool:
    return getattr(getattr(traced, "type", None), "dtype", None) in (torch.bool, torch.uint8)


def _dim(node, dim: int) -> int:
    return dim + len(node.args[0].type.shape) if dim < 0 else dim


def _size(x, dim: int):
    """``x.size(dim)`` at run time, a 0-d int64."""
    return op.Squeeze(op.Shape(x, start=dim, end=dim + 1))


def _in_range(cx, ids, size, negative_ok: bool):
    """``ids`` checked against ``[0, size)`` (``[-size, size)`` where ``negative_ok``), as the mode says: "raise"
    makes a negative id past the end (onnxruntime fails the run there; nothing to do where negatives are allowed),
    "report" records the flag of the output. Returns the ids to gather with."""
    size = size if ids.dtype == ir.DataType.INT64 else op.Cast(size, to=ids.dtype)
    if cx.index_checks == "raise":
        if negative_ok:
            return ids
        return op.Where(op.Less(ids, constant_like(cx, 0, ids)), size, ids)
    low = op.Neg(size) if negative_ok else constant_like(cx, 0, ids)
    cx.index_flags.append(op.And(op.GreaterOrEqual(op.ReduceMin(ids, keepdims=0), low),
                                 op.Less(op.ReduceMax(ids, keepdims=0), size)))
    return ids


def add_output(builder, flags: list) -> None:
    """``tracejit_index_ok``: every flag (one per checked index tensor) True."""
    combined = flags[0]
    for flag in flags[1:]:
        combined = op.And(combined, flag)
    builder.add_output(op.Identity(combined), OUTPUT)
