"""Ops outside ATen that the recorder keeps as one node: a reviewed list, default-deny.

A call of a custom op (``torch.ops.<namespace>.<name>``) is normally traced through: the recorder
records the ATen ops its Python kernel runs, and nothing where its kernel is C++. The ops listed
here are recorded as one node instead (``torchvision::nms.default``), called again by the generated
code, lowered to ONNX by export/vision_ops.py and sized at load like ATen's data-dependent ops.
Each entry holds the schema it was reviewed against: an op whose registered schema differs (another
torchvision) is traced through as before, never recorded under a schema nobody read.

``KEPT``: qualified name -> (the reviewed schema, whether the result's shape depends on the data, why
the op is kept).
"""
from __future__ import annotations

import functools

import torch

KEPT: dict[str, tuple[str, bool, str]] = {
    "torchvision::nms": (
        "torchvision::nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor", True,
        "detection models' non-maximum suppression: how many boxes survive depends on the boxes (as nonzero); "
        "ONNX has NonMaxSuppression"),
    "torchvision::roi_align": (
        "torchvision::roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
        "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor", False,
        "Faster / Mask R-CNN's box and mask heads pool each region to a fixed size; ONNX has RoiAlign"),
}


def kept_op(func) -> str | None:
    """``namespace::name.overload`` when ``func`` (an OpOverloadPacket / OpOverload the recorder saw) is one
    of ``KEPT`` with its reviewed schema, else None (the call is traced through)."""
    if isinstance(func, torch._ops.OpOverloadPacket):
        name, overload = func._qualified_op_name, "default"
    elif isinstance(func, torch._ops.OpOverload):
        name, overload = func._schema.name, func._overloadname
    else:
        return None
    if name not in KEPT or overload != "default":
        return None
    return f"{name}.default" if _reviewed_schema(name) else None


_REGISTERED: set = set()   # the names found registered with their reviewed schema (a library is never unloaded)


def _reviewed_schema(name: str) -> bool:
    """Is ``name`` registered with its reviewed schema? A miss is asked again next time (torchvision may be
    imported later in the process)."""
    if name in _REGISTERED:
        return True
    namespace, op = name.split("::")
    try:
        schema = getattr(getattr(torch.ops, namespace), op).default._schema
    except (AttributeError, RuntimeError):
        return False
    if str(schema) != KEPT[name][0]:
        return False
    _REGISTERED.add(name)
    return True


def registered(name: str) -> bool:
    """Is ``name`` (``torchvision::nms``) registered in this process with the schema it was reviewed against?"""
    return name in KEPT and _reviewed_schema(name)


@functools.lru_cache(maxsize=None)
def reviewed_schema(name: str):
    """The FunctionSchema ``name`` (one of ``KEPT``) was reviewed against, parsed from its text: what a
    file's node is checked against, whether or not the op is registered."""
    return torch._C.parse_schema(KEPT[name][0])


def is_kept(op: str) -> bool:
    """Is ``op`` (``torchvision::nms.default``, or the bare name) one of the custom ops recorded as a node?"""
    return op.split(".")[0] in KEPT


def custom_data_dependent_shape(op: str) -> bool:
    """Does the kept custom op ``op`` give a result whose shape depends on its inputs' values (nms)?"""
    entry = KEPT.get(op.split(".")[0])
    return entry is not None and entry[1]


def call_path(op: str) -> str:
    """The Python name generated code calls ``op`` by: ``torch.ops.torchvision.nms``."""
    namespace, name = op.split(".")[0].split("::")
    return f"torch.ops.{namespace}.{name}"
