"""What a file may ask of the custom ops the recorder keeps as nodes (ops/custom.py: torchvision's ``nms``
and ``roi_align``), checked at load like an ATen op of the allow-list (validate.py).

Default-deny, in this order: the op is one of ``custom.KEPT``, named with its default overload; this process
has it registered with the very schema it was reviewed against (else the file asks the user to import
torchvision first: the loader imports nothing a file names); its arguments bind to that schema and each is
of its type (schema_check.py); the op's own checks (below); its size rule (size_rules.CUSTOM_RULES,
op_sizes_vision.py) within the load budget at the traced shapes; one tensor output; and the call target
generated code will run is exactly ``torch.ops.<namespace>.<name>``.

Own checks: ``nms``'s boxes [N, 4], scores [N], both of one floating dtype, an IoU threshold that is a
number; ``roi_align``'s input [B, C, H, W] and rois [K, 5] of one floating dtype, and every other argument
a constant of the file (its kernel reads them unchecked): output size positive and at most
``MAX_POOLED`` per axis, a finite spatial scale, a sampling ratio of at most ``op_sizes_vision.MAX_GRID``,
a bool ``aligned``. At call time the budget plan (budget_plan.py) runs the size rule again on the real
tensors, where it also checks the rois' values (finite, image index within the batch).
"""
from __future__ import annotations

import math

from ..errors import LoadError
from ..ir import Value, target_text
from ..ops import custom
from ..support.call_budget import over_budget
from . import schema_check, size_rules
from .op_checks import meta_arguments
from .op_sizes_vision import MAX_GRID

MAX_POOLED = 1024   # output rows / columns per box (detection heads use 7 and 14)


def namespaces() -> set:
    """The namespaces a file's op may name besides ATen: those of the kept custom ops."""
    return {name.split("::")[0] for name in custom.KEPT}


def check_node(node, at: str, namespace: str, name: str, overload, max_elements: int) -> None:
    """Raise LoadError unless ``node`` is a call of a kept custom op a loaded program may make."""
    op = f"{namespace}::{name}"
    if op not in custom.KEPT:
        raise LoadError(f"{at}: {op} is not one of the custom ops a file may name ({', '.join(sorted(custom.KEPT))})")
    if overload not in (None, "default"):
        raise LoadError(f"{at}: {op} has no overload {overload!r} a file may name (only 'default')")
    if not custom.registered(op):
        raise LoadError(f"{at}: the program calls {op}, which this process has not registered with the schema "
                        f"tracejit reviewed ({custom.KEPT[op][0]}); import torchvision (the version the program "
                        "was traced with) before tracejit.load")
    bound = schema_check.check_arguments(name, custom.reviewed_schema(op), node, at)
    _OWN_CHECKS[op](bound, at)
    try:
        why = over_budget(size_rules.CUSTOM_RULES[op], meta_arguments(bound), max_elements)
    except ValueError as e:
        raise LoadError(f"{at}: {e}") from None
    if why is not None:
        raise LoadError(f"{at}: {op} at the traced sizes {why}")
    if len(node.outputs) != 1 or not hasattr(getattr(node.outputs[0], "type", None), "shape"):
        raise LoadError(f"{at}: {op} returns one tensor")
    want = f"fn:{custom.call_path(op)}"
    if node.target is None or target_text(node.target) != want:
        raise LoadError(f"{at}: {op} is called as {want!r}, not {target_text(node.target)[:60]!r}")


def _tensor(bound: dict, arg: str, rank: int, at: str, op: str):
    v = bound.get(arg)
    t = getattr(v, "type", None) if isinstance(v, Value) else None
    shape, dtype = getattr(t, "shape", None), getattr(t, "dtype", None)
    if shape is None or len(shape) != rank:
        raise LoadError(f"{at}: {op}'s {arg} must be a tensor of rank {rank}, found "
                        f"{'rank ' + str(len(shape)) if shape is not None else type(v).__name__}")
    if dtype is None or not dtype.is_floating_point:
        raise LoadError(f"{at}: {op}'s {arg} must be a floating-point tensor, found {dtype}")
    return shape, dtype


def _constant(bound: dict, arg: str, kinds, at: str, op: str):
    v = bound.get(arg)
    if isinstance(v, Value) or not isinstance(v, kinds) or (bool not in kinds and isinstance(v, bool)):
        raise LoadError(f"{at}: {op}'s {arg} must be a constant {kinds[0].__name__} of the file, found "
                        f"{'a value traced at call time' if isinstance(v, Value) else type(v).__name__}")
    return v


def _nms(bound: dict, at: str) -> None:
    (n, four), dtype = _tensor(bound, "dets", 2, at, "nms")
    (m,), score_dtype = _tensor(bound, "scores", 1, at, "nms")
    if four != 4 or n != m:
        raise LoadError(f"{at}: nms takes boxes [N, 4] and scores [N], found [{n}, {four}] and [{m}]")
    if dtype != score_dtype:
        raise LoadError(f"{at}: nms's boxes ({dtype}) and scores ({score_dtype}) must have one dtype")
    iou = bound.get("iou_threshold")
    if isinstance(iou, Value) and getattr(iou.type, "kind", None) not in ("float", "int"):
        raise LoadError(f"{at}: nms's iou_threshold must be a number, found a traced {getattr(iou.type, 'kind', 'tensor')}")


def _roi_align(bound: dict, at: str) -> None:
    _, dtype = _tensor(bound, "input", 4, at, "roi_align")
    (_, five), rois_dtype = _tensor(bound, "rois", 2, at, "roi_align")
    if five != 5:
        raise LoadError(f"{at}: roi_align's rois are [K, 5] (image index, x1, y1, x2, y2), found {five} columns")
    if dtype != rois_dtype:
        raise LoadError(f"{at}: roi_align's input ({dtype}) and rois ({rois_dtype}) must have one dtype")
    for arg in ("pooled_height", "pooled_width"):
        v = _constant(bound, arg, (int,), at, "roi_align")
        if not 1 <= v <= MAX_POOLED:
            raise LoadError(f"{at}: roi_align's {arg} = {v} is outside [1, {MAX_POOLED}]")
    scale = _constant(bound, "spatial_scale", (float, int), at, "roi_align")
    if not math.isfinite(scale):
        raise LoadError(f"{at}: roi_align's spatial_scale = {scale} is not finite")
    sampling = _constant(bound, "sampling_ratio", (int,), at, "roi_align")
    if sampling > MAX_GRID:
        raise LoadError(f"{at}: roi_align's sampling_ratio = {sampling} is above {MAX_GRID}")
    _constant(bound, "aligned", (bool,), at, "roi_align")


_OWN_CHECKS = {"torchvision::nms": _nms, "torchvision::roi_align": _roi_align}
assert set(_OWN_CHECKS) == set(custom.KEPT) == set(size_rules.CUSTOM_RULES)
