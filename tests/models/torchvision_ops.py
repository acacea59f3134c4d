"""Import torchvision beside a CPU torch whose build its C++ ops were not linked against.

PyPI's torchvision is built for PyPI's CUDA torch; beside the CPU torch the project tests with, its
``_C`` library does not load and ``import torchvision`` fails ("operator torchvision::nms does not
exist"). For tests only, the two ops detection models call are defined here in pure torch
(``torchvision::nms``, ``torchvision::roi_align`` through torchvision's own Python reference), and
torchvision is told its ops are present. Where its C++ library loads, nothing is replaced.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import sys

import torch

# where `make test` installs it: outside site-packages, so nothing else imports it by accident
FOLDER = os.path.join(sys.prefix, "vision-tests")

_LIB = None


def import_torchvision():
    """``torchvision``, or None when it is not installed."""
    if os.path.isdir(FOLDER) and FOLDER not in sys.path:
        sys.path.append(FOLDER)
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        return None
    if not _native_ops_load(spec):
        _define_ops()
    import torchvision
    if _LIB is not None:
        for name in ("torchvision.extension", "torchvision.ops.boxes", "torchvision.ops.roi_align"):
            module = importlib.import_module(name)   # (torchvision.ops.roi_align is also a function's name)
            module._has_ops = _ops_present
            module._assert_has_ops = _ops_present
    return torchvision


def _ops_present() -> bool:   # a def, not a lambda: torch.jit.trace reads its source
    return True


def _native_ops_load(spec) -> bool:
    if hasattr(torch.ops.torchvision, "nms"):
        return True
    for path in glob.glob(os.path.join(spec.submodule_search_locations[0], "_C*.so")):
        try:
            torch.ops.load_library(path)
            return True
        except (OSError, RuntimeError):
            return False
    return False


def _define_ops() -> None:
    global _LIB
    if _LIB is not None:
        return
    _LIB = torch.library.Library("torchvision", "DEF")
    _LIB.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIB.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")   # declared only: its
    # fake kernel is registered at import; quantized models are not tested
    _LIB.define("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")
    _LIB.impl("nms", _nms, "CPU")
    _LIB.impl("roi_align", _roi_align, "CPU")


def _nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression: indices of the kept boxes, highest score first."""
    order = scores.argsort(descending=True)
    boxes = boxes[order]
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    lt = torch.maximum(boxes[:, None, :2], boxes[None, :, :2])
    rb = torch.minimum(boxes[:, None, 2:], boxes[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(2)
    iou = inter / (area[:, None] + area[None, :] - inter)
    suppressed = torch.zeros(len(boxes), dtype=torch.bool)
    keep = []
    for i in range(len(boxes)):
        if not suppressed[i]:
            keep.append(i)
            suppressed |= iou[i] > iou_threshold
    return order[torch.tensor(keep, dtype=torch.long)]


def _roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    from torchvision.ops.roi_align import _roi_align as reference
    reference = getattr(reference, "__wrapped__", reference)   # torchvision wraps it in torch.compile
    return reference(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)
