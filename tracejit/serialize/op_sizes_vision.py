"""Size functions of the torchvision ops the recorder keeps as nodes (ops/custom.py): ``nms`` and ``roi_align``.

Same contract as op_sizes.py (the op's arguments bound to its reviewed schema's names, an element count
as a Python int, None while a size is unknown), and, like op_sizes.rnn, a ValueError for arguments the
kernel would trust wrongly: at load on meta tensors (the traced shapes), at call time on the real ones
(support/call_budget.size_check turns it into a GuardError before the kernel runs).

- ``nms(dets [N, 4], scores [N], iou)``: keeps at most N indices (how many depends on the boxes, as
  nonzero's count); its kernel compares every pair of boxes once: N^2 / 2 IoUs. Its C++ kernel checks
  the shapes itself; they are checked here too so that a file whose traced shapes cannot run is refused
  at load.
- ``roi_align(input [B, C, H, W], rois [K, 5], scale, ph, pw, sampling, aligned)``: K x C x ph x pw
  outputs, each the mean of a grid of bilinear samples (``sampling`` x ``sampling``, or, for a ratio
  <= 0, ``ceil(box extent / ph)`` per axis, which follows the boxes' values). torchvision's CPU and
  CUDA kernels trust the rois: column 0 is cast to int and used as the image index without a bounds
  check (a read outside the input), a NaN coordinate is cast to int (undefined behaviour, in practice
  another read outside), and an adaptive grid is cast to int (an overflow for a huge box). So at call
  time the rois must be finite, their image index in [0, B), and each grid axis at most
  ``MAX_GRID`` samples.
"""
from __future__ import annotations

import math

import torch

from .op_sizes import _shape

MAX_GRID = 2 ** 16   # samples per bin and axis an adaptive roi_align may take (a clipped box gives at most H / ph)


def _real(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type != "meta"


def nms_boxes(b) -> int:
    """The box count N, after checking ``dets`` is [N, 4] and ``scores`` [N] (ValueError otherwise)."""
    dets, scores = _shape(b.get("dets")), _shape(b.get("scores"))
    if dets is None or scores is None or len(dets) != 2 or dets[1] != 4 or len(scores) != 1 or scores[0] != dets[0]:
        raise ValueError(f"nms takes boxes [N, 4] and scores [N], not {list(dets or ())} and {list(scores or ())}")
    return dets[0]


def nms(b) -> int:
    """nms: at most N kept indices (plus the kernel's N-sized work tensors)."""
    return 4 * max(nms_boxes(b), 1)


def nms_flops(b) -> int:
    """nms: one IoU per pair of boxes."""
    n = nms_boxes(b)
    return n * n // 2


def _roi_shapes(b):
    x, rois = _shape(b.get("input")), _shape(b.get("rois"))
    if x is None or rois is None or len(x) != 4 or len(rois) != 2 or rois[1] != 5:
        raise ValueError(f"roi_align takes an input [B, C, H, W] and rois [K, 5], not {list(x or ())} and "
                         f"{list(rois or ())}")
    return x, rois


def _pooled(b):
    ph, pw = b.get("pooled_height"), b.get("pooled_width")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (ph, pw)):
        raise ValueError(f"roi_align's output size must be positive, not {ph} x {pw}")
    return ph, pw


def roi_align(b) -> int:
    """roi_align: K x C x ph x pw outputs. At call time, also the checks of the rois' values (above)."""
    x, rois = _roi_shapes(b)
    ph, pw = _pooled(b)
    grid = _grid(b, x, ph, pw)
    if grid[0] > MAX_GRID or grid[1] > MAX_GRID:
        raise ValueError(f"roi_align would take {grid[0]} x {grid[1]} samples per bin (at most {MAX_GRID} per "
                         "axis): its boxes are far larger than its input")
    return max(rois[0] * x[1] * ph * pw, 1)


def roi_align_flops(b) -> int:
    """roi_align: four reads per sample, a grid of samples per output (the largest box's, for an adaptive grid)."""
    x, rois = _roi_shapes(b)
    ph, pw = _pooled(b)
    gh, gw = _grid(b, x, ph, pw)
    return rois[0] * (x[1] + 1) * ph * pw * gh * gw * 4


def _grid(b, x, ph, pw):
    """Samples per bin along each axis: the constant sampling ratio, else the largest box's adaptive grid at a
    call (1 at load, where the boxes are not known). Checks the rois' values at a call."""
    rois, sampling = b.get("rois"), b.get("sampling_ratio")
    if not _real(rois):
        return (sampling, sampling) if isinstance(sampling, int) and sampling > 0 else (1, 1)
    if rois.numel() == 0:
        return (1, 1)
    with torch.no_grad():
        if not bool(torch.isfinite(rois).all()):
            raise ValueError("roi_align's rois hold a NaN or infinite coordinate")
        index = rois[:, 0]
        if not bool(((index >= 0) & (index < x[0])).all()):
            raise ValueError(f"roi_align's rois name an image outside the batch of {x[0]} (column 0 holds "
                             f"{float(index.min())} .. {float(index.max())})")
        if isinstance(sampling, int) and sampling > 0:
            return sampling, sampling
        scale = b.get("spatial_scale")
        scale = abs(float(scale)) if isinstance(scale, (int, float)) and math.isfinite(scale) else 1.0
        height = float((rois[:, 4] - rois[:, 2]).abs().max()) * scale
        width = float((rois[:, 3] - rois[:, 1]).abs().max()) * scale
    return max(math.ceil(height / ph), 1), max(math.ceil(width / pw), 1)
