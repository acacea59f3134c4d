"""Eager's range check on embedding ids, kept by the models of the onnxruntime / OpenVINO backends.

``torch.embedding`` raises IndexError for an id outside ``[0, num_embeddings)``. Its ONNX form, ``Gather``, does
not: a negative id picks a row from the end (onnxruntime and OpenVINO), and an id past the end fails the run in
onnxruntime but gives a row of zeros in OpenVINO: an answer where eager raises. For an embedding whose ids are not
computed from constants and sizes alone, a model exported for a backend (``index_checks``) therefore holds:

* ``"raise"`` (onnxruntime): the ids with each negative one replaced by ``rows``, so that onnxruntime's Gather
  fails the run for it as for any id past the end (two elementwise nodes on the ids, no output to read);
* ``"report"`` (OpenVINO): one boolean output, ``tracejit_index_ok``, after the guard outputs: every checked
  embedding's least id >= 0 and greatest id < rows.

Either way the backend hands such a call to the traced program (a failed run, or a False output:
backends/onnx_call.py), which raises eager's IndexError. A standalone file has neither (the default): a caller
would have to know.
"""
from __future__ import annotations

from ._deps import require
from .special_ops import constant_like, handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

OUTPUT = "tracejit_index_ok"
MODES = ("raise", "report")


@handles("aten::embedding.default", "aten::embedding")
def embedding(cx, node, args, kwargs):
    """torch_lib's Gather, with the ids' range checked as the lowering's ``index_checks`` mode says."""
    from .guards import _constant_only   # (export/guards.py imports the lowering's modules)
    mode = getattr(cx, "index_checks", None)
    rows = getattr(getattr(node.args[0], "type", None), "shape", (None,))[0] if node.args else None
    ids = node.args[1] if len(node.args) > 1 else None
    if mode is None or ids is None or not isinstance(rows, int) or _constant_only([ids], {}, sizes=True):
        return cx.call_aten("aten::embedding", args, kwargs)
    weight, id_values, *rest = args
    if mode == "raise":
        past_the_end = constant_like(cx, rows, id_values)
        id_values = op.Where(op.Less(id_values, constant_like(cx, 0, id_values)), past_the_end, id_values)
    else:
        least = op.ReduceMin(id_values, keepdims=0)
        greatest = op.ReduceMax(id_values, keepdims=0)
        cx.index_flags.append(op.And(op.GreaterOrEqual(least, constant_like(cx, 0, least)),
                                     op.Less(greatest, constant_like(cx, rows, greatest))))
    return cx.call_aten("aten::embedding", [weight, id_values, *rest], kwargs)


def add_output(builder, flags: list) -> None:
    """``tracejit_index_ok``: every flag (one per checked embedding) True."""
    combined = flags[0]
    for flag in flags[1:]:
        combined = op.And(combined, flag)
    builder.add_output(op.Identity(combined), OUTPUT)
