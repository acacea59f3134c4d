"""torchvision's ``nms`` and ``roi_align`` kept as nodes (tracejit/ops/custom.py) and exported as ONNX
NonMaxSuppression / RoiAlign (tracejit/export/vision_ops.py), and the conversions torchvision's detection
models needed beside them (issue #25 items 1, 4): each in onnxruntime (and OpenVINO when installed)
against eager and torch.jit's trace, on new shapes: other box counts (nms keeps a data-dependent number),
other feature-map sizes and region counts."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from backend_check import assert_backends_match
from torchvision_ops import import_torchvision

import tracejit
from tracejit.export.errors import ExportError

tv = import_torchvision()
pytestmark = pytest.mark.skipif(tv is None, reason="torchvision is not installed (make test installs it)")


def _boxes(n: int, seed: int, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=gen) * 40
    wh = torch.rand(n, 2, generator=gen) * 20 + 1
    return torch.cat([xy, xy + wh], 1).to(dtype), torch.rand(n, generator=gen).to(dtype)


def _nms(boxes, scores):
    return tv.ops.nms(boxes, scores, 0.3)


def test_nms_is_one_node_and_follows_the_number_of_boxes():
    example, new = _boxes(12, 0), [_boxes(30, 1), _boxes(5, 2), _boxes(1, 3)]
    kept = [len(_nms(*b)) for b in (example, *new)]
    assert len(set(kept)) > 2, f"the inputs must change how many boxes survive: {kept}"
    traced = tracejit.trace(_nms, example)
    assert [n.op for n in traced.graph.nodes if n.op.startswith("torchvision::")] == ["torchvision::nms.default"]
    assert not any("torchvision_ops" in str(n.source) for n in traced.graph.nodes), "its kernel was traced through"
    for boxes in new:
        torch.testing.assert_close(traced(*boxes), _nms(*boxes), rtol=0, atol=0)
    assert_backends_match(_nms, example, [(b, s) for b, s in new], "nms", rtol=0, atol=0)


@pytest.mark.parametrize("aligned,sampling", [(False, 2), (True, -1)])   # -1: adaptive, ONNX's 0
def test_roi_align_follows_the_feature_map_and_the_regions(aligned, sampling):
    def fn(features, rois):
        return tv.ops.roi_align(features, rois, (3, 2), spatial_scale=0.5, sampling_ratio=sampling, aligned=aligned)

    def inputs(batch, size, regions, seed):
        """Regions inside the image (a detector clips its boxes to it; the tests' pure-torch roi_align,
        torchvision's Python reference, does not zero samples beyond the map as its C++ kernel does)."""
        gen = torch.Generator().manual_seed(seed)
        image = torch.tensor([size + 3, size]) * 2.0    # x, y extent at spatial_scale 0.5
        start = torch.rand(regions, 2, generator=gen) * image * 0.6
        end = start + torch.rand(regions, 2, generator=gen) * image * 0.4
        index = torch.randint(0, batch, (regions, 1), generator=gen).float()
        return torch.randn(batch, 4, size, size + 3, generator=gen), torch.cat([index, start, end], 1)

    example = inputs(2, 24, 5, 0)
    new = [inputs(3, 32, 9, 1), inputs(1, 16, 2, 2)]
    traced = tracejit.trace(fn, example)
    assert [n.op for n in traced.graph.nodes if n.op.startswith("torchvision::")] == ["torchvision::roi_align.default"]
    assert_backends_match(fn, example, new, f"roi_align aligned={aligned} sampling={sampling}", rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn,why", [
    (lambda b, s: tv.ops.nms(b.double(), s.double(), 0.5), "float32 only"),
    (lambda b, s: tv.ops.nms(b, s, 1.5), "outside [0, 1]"),
])
def test_nms_refused_where_onnx_would_not_give_torchvision_answer(fn, why):
    traced = tracejit.trace(fn, _boxes(8, 0))
    with pytest.raises(ExportError, match=re.escape(why)) as info:
        tracejit.export_onnx(traced)
    assert "torchvision::nms" in str(info.value)
    assert "boxes.py:" in str(info.value), "the error names the source line (torchvision.ops.nms calls the op)"


def test_detection_helpers_export():
    """What torchvision's detection code records beside nms: ``torch.as_tensor(list)``, ``torch.tensor([k])``,
    ``torch.meshgrid``, ``torch.where(cond)``, ``numel()``, ``torch._shape_as_tensor``, a batch-1 split, a split
    into pieces of other sizes and an unbind (each piece an output of one ONNX Split)."""
    def fn(x, y):
        mean = torch.as_tensor([0.5, -1.0, 2.0], dtype=x.dtype)
        k = torch.min(torch.cat((torch.tensor([4], dtype=torch.long), torch._shape_as_tensor(x)[1].unsqueeze(0))))
        gy, gx = torch.meshgrid(y, x[0], indexing="ij")
        hx, hy = torch.meshgrid(y, x[0], indexing="xy")
        (kept,) = y.split([y.shape[0]])
        rows = torch.where(x[0] > 0)[0]
        one, two = y.unsqueeze(0).expand(3, -1).split([1, 2])   # pieces of other sizes (per-level anchors)
        first, _, third = x.expand(3, -1).mul(2).unbind(0)
        return gy + gx, hx * hy, x[:, :3] * mean, k * x.numel(), kept.sum(), rows, one, two * 3, first - third

    example = (torch.randn(1, 6), torch.randn(5))
    new = [(torch.randn(1, 9), torch.randn(2)), (torch.randn(1, 3), torch.randn(7))]
    assert_backends_match(fn, example, new, "detection helpers")


@pytest.mark.parametrize("stride,padding,output_padding,groups", [(2, 0, 0, 1), (2, 1, 1, 2), (1, 1, 0, 1)])
def test_conv_transpose_exports(stride, padding, output_padding, groups):
    """Mask R-CNN's mask head upsamples with ConvTranspose2d (``aten::conv_transpose2d.input``)."""
    gen = torch.Generator().manual_seed(stride + padding)
    weight, bias = torch.randn(4, 6 // groups, 3, 3, generator=gen), torch.randn(6, generator=gen)

    def fn(x):
        return F.conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups)

    example = (torch.randn(1, 4, 5, 6, generator=gen),)
    assert_backends_match(fn, example, [(torch.randn(2, 4, 7, 3, generator=gen),)], "conv_transpose2d")


def test_split_into_pieces_of_other_sizes_is_one_onnx_split():
    """Faster R-CNN splits its per-level anchors (60 / 135 here). As SplitToSequence + SequenceAt, onnxruntime
    planned each piece's buffer from one piece's shape ("Shape mismatch attempting to re-use buffer", a failed
    run in the zoo's Faster R-CNN); as one Split each piece has its own output."""
    def fn(z, w):
        a, b = z.split([60, 135], dim=1)
        c, d = w.split([3, 9], dim=0)
        return torch.cat([a.sigmoid() * 2, b.sigmoid() + 1], 1), (c.exp() + 1).sum(), (d * 2).relu()

    example = (torch.randn(1, 195), torch.randn(12, 4))
    proto = tracejit.export_onnx(tracejit.trace(fn, example))
    ops = [n.op_type for n in proto.graph.node]
    assert "SequenceAt" not in ops and ops.count("Split") == 2, ops
    assert_backends_match(fn, example, [(torch.randn(3, 195), torch.randn(12, 7))], "split 60 / 135")
