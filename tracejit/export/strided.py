"""Layouts in an ONNX model: guards on ``x.stride()`` and ``as_strided`` of a tensor whose strides the trace read.

An ONNX value has no strides: it is its logical values, row-major. transformers' Longformer chunks a sequence with
``x.as_strided(size, stride)`` where ``stride`` is computed in Python from ``x.stride()`` of a non-contiguous view
(``query.transpose(1, 2).reshape(...)``): the trace records the read as a guard (kind ``meta``, call
``method:stride``, the strides it gave) and the strides Python computed from them as constants.

- The guard: the strides it saw describe a dense layout, the dimensions in some order (``order``: outermost first,
  each stride the product of the sizes after it). Its ONNX form (``layout_holds``) computes the strides that layout
  has at the call's sizes, from ``Shape(x)``, and compares them with the traced ones: the model (guard_checks.py /
  guard_outputs.py) checks it like a size guard, and the onnxruntime / OpenVINO programs also evaluate the guard
  itself before each run on meta tensors of the call's shapes (backends/intermediate_sizes.py: torch's own
  strides), so a call where torch's strides differ is handed to the traced program. A layout that is not dense
  (a stride 0 from ``expand``, gaps from a slice) has no form: the export fails naming the line (default-deny).
- ``as_strided`` of such a tensor reads its storage: ``x`` transposed to that order and flattened is the storage
  (dense: every element once, the first at offset 0), and torch_lib's ``as_strided`` gathers from it. A read past
  the storage fails the run (Gather's bounds), never an answer from other memory. An explicit
  ``storage_offset`` counts from the storage's start, which the trace did not record: refused.
"""
from __future__ import annotations

import numpy as np

from ._deps import require
from .errors import ExportError
from .guards import is_layout_guard
from .special_ops import HANDLERS
from .torch_lib_lookup import lookup
from ..ir import Value

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

def traced_layouts(graph) -> dict:
    """{id(Value): the strides the trace read of it} from the full ``x.stride()`` guards of ``graph``."""
    return {id(n.args[0]): list(n.attrs["expected"]) for n in graph.nodes
            if n.op == "tracejit::guard" and is_layout_guard(n) and len(n.args) == 1
            and isinstance(n.attrs.get("expected"), (list, tuple))}


def dense_order(shape, strides, where=None) -> list:
    """The dimensions outermost first where ``strides`` are the dense layout of ``shape`` in that order (each the
    product of the sizes after it); ExportError where they are not (a broadcast stride 0, a slice's gaps)."""
    shape, strides = [int(s) for s in shape], [int(s) for s in strides]
    if len(shape) != len(strides):
        raise ExportError(f"the trace read strides {strides} of a tensor of shape {shape}", "tracejit::guard", where)
    order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
    if dense_strides(shape, order) != strides:
        raise ExportError(f"the trace read strides {strides} of a tensor of shape {shape}: not a dense layout (a "
                          "broadcast or a slice of a larger tensor), which an ONNX model, holding values and no "
                          "memory, cannot reproduce", "tracejit::guard", where)
    return order


def dense_strides(shape, order) -> list:
    """The strides of ``shape`` laid out densely with ``order``'s dimensions outermost first."""
    out, step = [0] * len(shape), 1
    for d in reversed(order):
        out[d] = step
        step *= shape[d]
    return out


def layout_holds(lowering, node):
    """The 0-d boolean ONNX value: does the traced layout of ``node``'s tensor give, at the call's sizes, the strides
    the trace read? (The form of a layout guard, ``is_layout_guard``.)"""
    x, expected = node.args[0], node.attrs.get("expected")
    where = node.source or node.attrs.get("line")
    full = traced_layouts_of(node)
    order = dense_order(x.type.shape, full, where)
    sizes = op.Shape(lowering.arg(x))
    step, strides = _int64(1), [None] * len(order)
    for d in reversed(order):
        strides[d] = step
        step = op.Mul(step, op.Gather(sizes, _int64(d)))
    picked = strides if len(node.args) == 1 else [strides[node.args[1] % len(order)]]
    want = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    holds = None
    for got, w in zip(picked, want):
        same = op.Equal(got, _int64(int(w)))
        holds = same if holds is None else op.And(holds, same)
    return holds


def traced_layouts_of(node) -> list:
    """The full strides of a layout guard's tensor: its own where it read all of them, else the dense row-major
    strides of the traced shape, which the one read stride must match (else no form: default-deny)."""
    x, expected = node.args[0], node.attrs.get("expected")
    if len(node.args) == 1:
        return list(expected)
    shape = [int(s) for s in x.type.shape]
    row_major = dense_strides(shape, list(range(len(shape))))
    if row_major[node.args[1] % len(shape)] != expected:
        raise ExportError(f"the trace read stride({node.args[1]}) = {expected} of a tensor of shape {shape}, not its "
                          "row-major stride: the layout is not known", "tracejit::guard",
                          node.source or node.attrs.get("line"))
    return row_major


def _int64(v: int):
    return op.Constant(value=ir.tensor(np.array(v, dtype=np.int64)))


def as_strided(cx, node, args, kwargs):
    """``as_strided`` of a tensor whose strides the trace read: gathered from its storage (see the module text)."""
    x = node.args[0]
    offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
    strides = cx.layouts.get(id(x)) if isinstance(x, Value) else None
    if strides is None or offset is not None:
        raise ExportError("as_strided reads a tensor's memory; an ONNX model holds values: tracejit exports it only "
                          "on a tensor whose strides the traced code read (x.stride(), a dense layout), without a "
                          f"storage_offset (here: {'a storage_offset' if offset is not None else 'no stride read'})",
                          node.op, node.source)
    order = dense_order(x.type.shape, strides, node.source)
    storage = args[0] if order == sorted(order) else op.Transpose(args[0], perm=order)
    return [cx._call_torch_lib(lookup("aten::as_strided"), [storage, args[1], args[2]], {})]


HANDLERS["aten::as_strided"] = as_strided
HANDLERS["aten::as_strided.default"] = as_strided
