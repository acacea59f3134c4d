"""``torchvision::roi_align`` computed as torchvision's pure-torch reference computes it, 5-20x faster.

Where torchvision's C++ library does not load (a CPU torch it was not built for), the op's CPU kernel is
torchvision's Python reference (``torchvision.ops.roi_align._roi_align``), registered in its place. That
reference gathers the four corners of every sample with ``input[batch, channels, y, x]``: four int32 index
tensors that broadcast to [K, C, PH, PW, IY, IX], each of which ``aten::index`` first expands and copies
into an int64 tensor of that full size. In torchvision's detectors that copy is half of the whole call
(Faster R-CNN MobileNet batch 1: 116 of 220 ms; Mask R-CNN batch 8: 1.4 of 2.9 s).

``reference_roi_align`` computes the same numbers with the same float operations, in the same order, on the
same values: the sample coordinates and weights as the reference writes them, the corners gathered as rows
of the channels-last input (``index_select`` of int64 row numbers computed once per RoI and sample, no
[K, C, ...] index), ``((w1 * v1 + w2 * v2) + w3 * v3) + w4 * v4`` per element, summed over the samples
in the reference's own layout [K, C, PH, PW, IY, IX] (the same reduction on the same memory), divided by the
same count. Only the integer index math differs, and integers are exact.

That is torchvision's Python reference, not its C++ kernel (which computes a sample's offset as
``(iy + .5) * bin / grid``, not ``(iy + .5) * (bin / grid)``, and accumulates in another order). So the
kernel is used only where ``matches_registered`` found the registered CPU kernel giving this kernel's answer
to the bit on a probe of the node's own settings (default-deny: a C++ or any other kernel keeps the op), and
only for the settings the reference computes with fixed grids (``sampling_ratio > 0``). A call outside what
the kernel computes the reference's way (another dtype or device, autograd, no RoIs, a batch index or a
sample outside the input: the reference's negative-index wrap-around or its error) runs the registered op.
"""
from __future__ import annotations

import functools

import torch

PROBE_SHAPE = (2, 3, 9, 11)   # the probe's input [N, C, H, W]
PROBE_ROIS = 24


def reference_roi_align(input: torch.Tensor, rois: torch.Tensor, spatial_scale: float, pooled_height: int,
                        pooled_width: int, sampling_ratio: int, aligned: bool):
    """torchvision's reference ``_roi_align`` for ``sampling_ratio > 0`` on a CPU float tensor, or None where a
    batch index or a sample's row falls outside ``input`` (the caller then runs the registered op)."""
    n, c, height, width = input.shape
    dtype = input.dtype
    ph, pw = torch.arange(pooled_height), torch.arange(pooled_width)
    batch = rois[:, 0].int()
    offset = 0.5 if aligned else 0.0
    start_w = rois[:, 1] * spatial_scale - offset
    start_h = rois[:, 2] * spatial_scale - offset
    roi_width = (rois[:, 3] * spatial_scale - offset) - start_w
    roi_height = (rois[:, 4] * spatial_scale - offset) - start_h
    if not aligned:
        roi_width, roi_height = torch.clamp(roi_width, min=1.0), torch.clamp(roi_height, min=1.0)
    bin_h, bin_w = roi_height / pooled_height, roi_width / pooled_width
    grid = torch.arange(sampling_ratio)
    y = (start_h[:, None, None] + ph[None, :, None] * bin_h[:, None, None]
         + (grid[None, None, :] + 0.5).to(dtype) * (bin_h / sampling_ratio)[:, None, None])   # [K, PH, IY]
    x = (start_w[:, None, None] + pw[None, :, None] * bin_w[:, None, None]
         + (grid[None, None, :] + 0.5).to(dtype) * (bin_w / sampling_ratio)[:, None, None])   # [K, PW, IX]
    y_low, y_high, ly, hy = _corners(y, height, dtype)
    x_low, x_high, lx, hx = _corners(x, width, dtype)
    if batch.min() < 0 or batch.max() >= n or y_low.min() < 0 or x_low.min() < 0:
        return None
    base = batch.long()[:, None, None, None, None] * (height * width)

    def rows(ys, xs):   # [K, PH, PW, IY, IX]: row numbers of the channels-last input
        return base + ys.long()[:, :, None, :, None] * width + xs.long()[:, None, :, None, :]

    index = torch.stack([rows(y_low, x_low), rows(y_low, x_high), rows(y_high, x_low), rows(y_high, x_high)])
    channels_last = input.permute(0, 2, 3, 1).reshape(n * height * width, c)
    corners = channels_last.index_select(0, index.reshape(-1)).view(*index.shape, c)   # [4, K, PH, PW, IY, IX, C]

    def outer(a, b):    # the reference's outer_prod, laid out [K, PH, PW, IY, IX, 1]
        return a[:, :, None, :, None, None] * b[:, None, :, None, :, None]

    v1, v2, v3, v4 = corners.unbind(0)
    val = v1 * outer(hy, hx)
    val += v2 * outer(hy, lx)
    val += v3 * outer(ly, hx)
    val += v4 * outer(ly, lx)
    output = val.permute(0, 5, 1, 2, 3, 4).contiguous().sum((-1, -2))   # the reference's layout and reduction
    output /= max(sampling_ratio * sampling_ratio, 1)
    return output.to(dtype)


def _corners(t: torch.Tensor, size: int, dtype):
    """The reference's ``_bilinear_interpolate`` along one axis: (low, high, l, h) for sample positions ``t``."""
    t = t.clamp(min=0)
    low = t.int()
    high = torch.where(low >= size - 1, size - 1, low + 1)
    low = torch.where(low >= size - 1, size - 1, low)
    t = torch.where(low >= size - 1, t.to(dtype), t)
    lt = t - low
    return low, high, lt, 1.0 - lt


class RoiAlignKernel:
    """``torchvision::roi_align`` with fixed settings: ``reference_roi_align`` where it applies, else the op."""

    def __init__(self, spatial_scale: float, pooled_height: int, pooled_width: int, sampling_ratio: int,
                 aligned: bool):
        self.settings = (spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)

    def __call__(self, input, rois):
        if _fits(input, rois):
            out = reference_roi_align(input, rois, *self.settings)
            if out is not None:
                return out
        return torch.ops.torchvision.roi_align(input, rois, *self.settings)

    def describe(self) -> str:
        return "roi_align:reference(scale=%g, %dx%d, sampling=%d, aligned=%s)" % self.settings


def _fits(input, rois) -> bool:
    if not (isinstance(input, torch.Tensor) and isinstance(rois, torch.Tensor)):
        return False
    if input.device.type != "cpu" or rois.device.type != "cpu" or input.dtype != torch.float32 \
            or rois.dtype != torch.float32 or input.dim() != 4 or rois.dim() != 2 or rois.shape[1] != 5:
        return False
    if rois.shape[0] == 0 or input.numel() == 0:
        return False
    return not (torch.is_grad_enabled() and (input.requires_grad or rois.requires_grad))


def matches_registered(spatial_scale: float, pooled_height: int, pooled_width: int, sampling_ratio: int,
                       aligned: bool) -> bool:
    """Does the registered CPU kernel of ``torchvision::roi_align`` give ``reference_roi_align``'s answer, to the
    bit, on a probe with these settings (RoIs inside, across and beyond the input's edges, both images)?"""
    if not (isinstance(sampling_ratio, int) and sampling_ratio > 0) or not hasattr(torch.ops, "torchvision") \
            or not hasattr(torch.ops.torchvision, "roi_align"):
        return False
    dump = getattr(torch._C, "_dispatch_dump", lambda name: "")("torchvision::roi_align")
    return _probe(float(spatial_scale), int(pooled_height), int(pooled_width), sampling_ratio, bool(aligned), dump)


@functools.lru_cache(maxsize=64)
def _probe(spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned, registration: str) -> bool:
    gen = torch.Generator().manual_seed(0)
    n, _, height, width = PROBE_SHAPE
    image = torch.randn(PROBE_SHAPE, generator=gen)
    extent = torch.tensor([width, height], dtype=torch.float32) / spatial_scale
    start = torch.rand(PROBE_ROIS, 2, generator=gen) * extent * 1.2 - 0.1 * extent
    size = torch.rand(PROBE_ROIS, 2, generator=gen) * extent * 0.8
    batch = (torch.arange(PROBE_ROIS) % n).float()[:, None]
    rois = torch.cat([batch, start, start + size], 1)
    settings = (spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)
    try:
        with torch.no_grad():
            want = torch.ops.torchvision.roi_align(image, rois, *settings)
            got = reference_roi_align(image, rois, *settings)
    except Exception:  # noqa: BLE001  (a registered kernel that fails the probe is not the reference)
        return False
    return got is not None and got.shape == want.shape and want.dtype == torch.float32 \
        and torch.equal(got.view(torch.int32), want.view(torch.int32))
