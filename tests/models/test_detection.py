"""torchvision's detection models trace (issue #25 item 5): the ImageList that GeneralizedRCNNTransform
returns is traced through in place (trace/through.py), and on other image sizes the traced program gives
eager's boxes, scores, labels and masks. (tests/trace/test_traced_through.py compares with torch.jit.trace.)
Files cannot hold them yet: ``torchvision::nms`` / ``roi_align`` are not ATen ops, and a file may
name ATen ops only."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit

from torchvision_ops import import_torchvision

pytestmark = pytest.mark.skipif(import_torchvision() is None,
                                reason="torchvision is not installed (make test installs it)")


def _detector(kind: str):
    """A small Faster R-CNN, RetinaNet or Mask R-CNN: torchvision's heads on a two-conv backbone."""
    from torchvision.models import detection
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.ops import MultiScaleRoIAlign
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                             nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
    backbone.out_channels = 16
    anchors = AnchorGenerator(sizes=((16, 32),), aspect_ratios=((0.5, 1.0, 2.0),))
    common = dict(min_size=64, max_size=96, anchor_generator=anchors) if kind == "retinanet" else \
        dict(min_size=64, max_size=96, rpn_anchor_generator=anchors, box_score_thresh=0.0,
             rpn_pre_nms_top_n_test=30, rpn_post_nms_top_n_test=12, box_detections_per_img=6,
             box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2))
    if kind == "fasterrcnn":
        return detection.FasterRCNN(backbone, num_classes=4, **common).eval()
    if kind == "maskrcnn":
        return detection.MaskRCNN(backbone, num_classes=4, mask_roi_pool=MultiScaleRoIAlign(["0"], 14, 2),
                                  **common).eval()
    return detection.RetinaNet(backbone, num_classes=4, score_thresh=0.0, topk_candidates=20,
                               detections_per_img=6, **common).eval()


class AsTuple(nn.Module):
    """The detector's list of dicts as a tuple of tensors (a serving wrapper)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, images):
        return tuple(t for out in self.model(images) for t in out.values())


def _images(*sizes):
    gen = torch.Generator().manual_seed(sum(h * w for h, w in sizes))
    return [torch.rand(3, h, w, generator=gen) for h, w in sizes]


def _flat(out):
    return [t for o in out for t in o.values()] if isinstance(out, list) else list(out)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fasterrcnn", "retinanet", "maskrcnn"])
def test_detection_traces_and_follows_new_image_sizes(kind):
    model = AsTuple(_detector(kind))
    example, new = _images((64, 64), (60, 80)), _images((56, 90), (70, 50))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = model(new)
        assert not all(torch.equal(a, b) for a, b in zip(want, model(example))), "the images must move the boxes"
        traced = tracejit.trace(model, (example,), check_trace=False)
        got = traced(new)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.slow
def test_detection_with_its_list_of_dicts_output():
    model = _detector("fasterrcnn")
    example, new = _images((64, 64)), _images((50, 90))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (example,), check_trace=False, strict=False)
        got, want = traced(new), model(new)
    assert [list(o) for o in got] == [list(o) for o in want] == [["boxes", "labels", "scores"]]
    for g, w in zip(_flat(got), _flat(want)):
        torch.testing.assert_close(g, w)
