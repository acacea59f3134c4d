"""kernels/roi_align.py + passes/vision_kernels.py: where torchvision's roi_align is its pure-torch reference (the
C++ library does not load beside this CPU torch), the optimized program computes the reference's arithmetic without
its full-size int64 index copies: eager's answer to the bit on new images, boxes and settings, in detectors too
(which keep only exact passes); a kernel other than the reference keeps the op; calls the kernel does not compute
the reference's way run the op."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.kernels import roi_align as kernel_module
from tracejit.kernels.roi_align import RoiAlignKernel, matches_registered, reference_roi_align
from tracejit.passes.vision_kernels import roi_align_kernel_nodes

from torchvision_ops import import_torchvision

tv = import_torchvision()
pytestmark = [pytest.mark.skipif(tv is None, reason="torchvision is not installed (make test installs it)"),
              pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")]


class Pool(nn.Module):
    """A conv, then roi_align of its features at the given boxes, then a threshold (a decision: exact passes only)."""

    def __init__(self, size=7, scale=0.5, sampling=2, aligned=False):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.size, self.scale, self.sampling, self.aligned = size, scale, sampling, aligned

    def forward(self, x, boxes):
        f = tv.ops.roi_align(self.conv(x), boxes, self.size, self.scale, self.sampling, self.aligned)
        return f, (f.mean((2, 3)) > 0).float()


def _boxes(n, k, h, w, seed, batch=None):
    gen = torch.Generator().manual_seed(seed)
    start = torch.rand(k, 2, generator=gen) * torch.tensor([w, h]) * 2.4 - 4
    size = torch.rand(k, 2, generator=gen) * torch.tensor([w, h]) * 1.5
    index = torch.randint(0, n, (k, 1), generator=gen).float() if batch is None else torch.full((k, 1), batch)
    return torch.cat([index, start, start + size], 1)


def _program_nodes(program):
    return roi_align_kernel_nodes(program.forward.lowered.graph)


def _bits(t):
    return t.view(torch.int32)


@pytest.mark.parametrize("sampling,aligned,size", [(2, False, 7), (1, True, 5), (3, False, 4), (4, True, 14)])
def test_optimized_roi_align_is_eager_to_the_bit_on_new_shapes(sampling, aligned, size):
    model = Pool(size, 0.5, sampling, aligned).eval()
    example = (torch.randn(2, 3, 20, 24), _boxes(2, 9, 40, 48, 0))
    program = tracejit.optimize_for_inference(tracejit.trace(model, example))
    assert len(_program_nodes(program)) == 1
    with torch.no_grad():
        for n, h, w, k, seed in [(2, 20, 24, 9, 1), (3, 31, 17, 40, 2), (1, 8, 9, 1, 3), (4, 26, 30, 70, 4)]:
            args = (torch.randn(n, 3, h, w), _boxes(n, k, 2 * h, 2 * w, seed))
            want, got = model(*args), program(*args)
            for g, e in zip(got, want, strict=True):
                assert g.shape == e.shape and torch.equal(_bits(g), _bits(e))


def test_calls_the_kernel_does_not_compute_run_the_op():
    """A negative batch index (the reference wraps it around), an empty set of boxes, a NaN box, float64: the op's
    own answer or error."""
    kernel = RoiAlignKernel(0.5, 7, 7, 2, False)
    op = torch.ops.torchvision.roi_align
    x = torch.randn(3, 4, 10, 12)
    wrapped = _boxes(3, 5, 20, 24, 7, batch=-1.0)
    assert reference_roi_align(x, wrapped, 0.5, 7, 7, 2, False) is None
    for args in [(x, wrapped), (x, torch.zeros(0, 5)), (x.double(), _boxes(3, 5, 20, 24, 8).double())]:
        want, got = op(*args, 0.5, 7, 7, 2, False), kernel(*args)
        assert got.shape == want.shape and got.dtype == want.dtype and torch.equal(got, want)
    nan = _boxes(3, 4, 20, 24, 9)
    nan[1, 2] = float("nan")
    try:
        want = op(x, nan, 0.5, 7, 7, 2, False)
    except IndexError as e:
        with pytest.raises(IndexError, match=str(e)[:30]):
            kernel(x, nan)
    else:
        assert torch.equal(kernel(x, nan).nan_to_num(7.0), want.nan_to_num(7.0))


def _other_arithmetic(input, rois, scale, ph, pw, sampling, aligned):
    """torchvision's C++ kernel's sample offsets: (iy + 0.5) * bin / grid, not (iy + 0.5) * (bin / grid)."""
    n, c, h, w = input.shape
    out = torch.empty(rois.shape[0], c, ph, pw)
    for k, (b, x1, y1, x2, y2) in enumerate(rois.tolist()):
        bh, bw = max((y2 - y1) * scale, 1.0) / ph, max((x2 - x1) * scale, 1.0) / pw
        ys = torch.tensor([[y1 * scale + p * bh + (i + 0.5) * bh / sampling for i in range(sampling)]
                           for p in range(ph)])
        xs = torch.tensor([[x1 * scale + p * bw + (i + 0.5) * bw / sampling for i in range(sampling)]
                           for p in range(pw)])
        grid = torch.stack([xs[None, :, None, :].expand(ph, pw, sampling, sampling),
                            ys[:, None, :, None].expand(ph, pw, sampling, sampling)], -1)
        grid = grid.reshape(1, ph * pw, sampling * sampling, 2) / torch.tensor([w - 1, h - 1]) * 2 - 1
        s = torch.nn.functional.grid_sample(input[int(b)][None], grid, align_corners=True)
        out[k] = s.mean(-1).reshape(c, ph, pw)
    return out


def test_a_registered_kernel_other_than_the_reference_keeps_the_op(monkeypatch):
    model = Pool(7, 0.5, 2, False).eval()
    example = (torch.randn(2, 3, 20, 24), _boxes(2, 9, 40, 48, 0))
    traced = tracejit.trace(model, example)
    kernel_module._probe.cache_clear()
    monkeypatch.setattr(torch.ops.torchvision, "roi_align", _other_arithmetic, raising=False)
    try:
        assert not matches_registered(0.5, 7, 7, 2, False)
        program = tracejit.optimize_for_inference(traced)
        assert _program_nodes(program) == []
        args = (torch.randn(2, 3, 14, 18), _boxes(2, 5, 28, 36, 5))
        with torch.no_grad():
            assert torch.equal(program(*args)[0], _other_arithmetic(model.conv(args[0]), args[1], 0.5, 7, 7, 2, False))
    finally:
        kernel_module._probe.cache_clear()


def test_adaptive_sampling_keeps_the_op():
    """sampling_ratio=0: the reference samples a grid that follows each box; the kernel does not compute it."""
    model = Pool(7, 0.5, 0, False).eval()
    example = (torch.randn(1, 3, 12, 12), _boxes(1, 4, 24, 24, 0))
    program = tracejit.optimize_for_inference(tracejit.trace(model, example))
    assert _program_nodes(program) == []
    args = (torch.randn(1, 3, 10, 14), _boxes(1, 6, 20, 28, 1))
    with torch.no_grad():
        assert torch.equal(program(*args)[0], model(*args)[0])


@pytest.mark.parametrize("kind", ["fasterrcnn", "maskrcnn"])
def test_detectors_optimized_program_is_eager_to_the_bit_with_kernels(kind):
    """Small detectors (MultiScaleRoIAlign in the box head, and the mask head's): each roi_align becomes a kernel and
    the detections are eager's to the bit (the programs keep only exact passes: they threshold scores). Faster
    R-CNN on new image sizes; Mask R-CNN on its example (it pastes each mask at int(box[2] - box[0]), a value
    guard: new images go to the traced program)."""
    from test_detection import AsTuple, _detector, _images
    model = AsTuple(_detector(kind)).eval()
    example = _images((64, 64), (60, 80))
    calls = [example] + ([_images((56, 90), (70, 50)), _images((96, 72), (64, 100))] if kind == "fasterrcnn" else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (example,), check_trace=False)
        traced.drop_original()   # no fallback to a retrace: the program answers, or raises
        program = tracejit.optimize_for_inference(traced)
        assert len(_program_nodes(program)) == (2 if kind == "maskrcnn" else 1)
        with torch.no_grad():
            for images in calls:
                want, got = model(images), program(images)
                for g, e in zip(got, want, strict=True):
                    assert g.shape == e.shape and torch.equal(g, e)
