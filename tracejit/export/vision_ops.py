"""ONNX for the torchvision ops the recorder keeps as nodes (ops/custom.py): ``nms`` and ``roi_align``.

The forms are torchvision's own ONNX symbolics (torchvision/ops/_register_onnx_ops.py, opset 16 for
roi_align), which give its kernels' answers in onnxruntime:

- ``nms(boxes [N, 4], scores [N], iou)`` -> ``NonMaxSuppression`` on one batch and one class, with no
  limit on the boxes kept; column 2 of its selected indices is torchvision's ``keep`` (highest score
  first, a box suppressed when its IoU with a kept one is above ``iou``).
- ``roi_align(input, rois [K, 5], scale, h, w, sampling, aligned)`` -> ``RoiAlign`` (average mode):
  column 0 of the rois is the batch index, columns 1-4 the box; ``aligned`` is the half-pixel
  offset (``half_pixel``, else ``output_half_pixel``); a sampling ratio <= 0 is the adaptive one, ONNX's 0.

Refused (ExportError naming the op), where the ONNX form would not give torchvision's answer: inputs
other than float32 (NonMaxSuppression takes float32 only; torchvision's symbolic casts, which changes
float64's answer), an IoU threshold outside [0, 1] (onnxruntime rejects it at run time), and sizes,
thresholds or flags computed by the trace rather than constants (ONNX takes them as attributes).
"""
from __future__ import annotations

import sys

import torch

from ._deps import require
from .errors import ExportError
from .special_ops import handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402


def _refuse(node, why: str):
    raise ExportError(f"cannot export {node.op} to ONNX: {why}", node.op, node.source)


def _float32(node, *positions):
    for i in positions:
        t = node.args[i].type
        if getattr(t, "dtype", None) is not torch.float32:
            _refuse(node, f"argument {i} is {getattr(t, 'dtype', t)}; ONNX's form gives torchvision's answer for "
                          "float32 only")


def _constant(node, value, what: str, kinds):
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        _refuse(node, f"its {what} is computed by the trace ({value!r}); ONNX takes it as a constant")
    return value


def _int64(values):
    return op.Constant(value=ir.tensor(list(values), dtype=ir.DataType.INT64))


@handles("torchvision::nms.default")
def nms(cx, node, args, kwargs):
    boxes, scores, iou = args
    _float32(node, 0, 1)
    iou = _constant(node, iou, "IoU threshold", (float, int))
    if not 0.0 <= iou <= 1.0:
        _refuse(node, f"IoU threshold {iou} is outside [0, 1], which ONNX NonMaxSuppression requires")
    # one batch, one class; a static 4 coordinates (OpenVINO's kernel needs it, an input's axes are dynamic)
    selected = op.NonMaxSuppression(op.Reshape(boxes, _int64([1, -1, 4])), op.Reshape(scores, _int64([1, 1, -1])),
                                    _int64([sys.maxsize]),
                                    op.Constant(value=ir.tensor([float(iou)], dtype=ir.DataType.FLOAT)))
    return [op.Squeeze(op.Slice(selected, _int64([2]), _int64([3]), _int64([1])), _int64([1]))]


@handles("torchvision::roi_align.default")
def roi_align(cx, node, args, kwargs):
    x, rois, scale, height, width, sampling, aligned = args
    _float32(node, 0, 1)
    scale = _constant(node, scale, "spatial scale", (float, int))
    height = _constant(node, height, "output height", (int,))
    width = _constant(node, width, "output width", (int,))
    sampling = _constant(node, sampling, "sampling ratio", (int,))
    aligned = _constant(node, aligned, "aligned flag", (bool,))
    one = _int64([1])
    batch = op.Cast(op.Squeeze(op.Slice(rois, _int64([0]), one, one), one), to=ir.DataType.INT64)
    boxes = op.Slice(rois, one, _int64([5]), one)
    return [op.RoiAlign(x, boxes, batch, mode="avg", output_height=height, output_width=width,
                        sampling_ratio=max(sampling, 0), spatial_scale=float(scale),
                        coordinate_transformation_mode="half_pixel" if aligned else "output_half_pixel")]
