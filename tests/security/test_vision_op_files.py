"""Files naming torchvision's ``nms`` / ``roi_align`` (the custom ops the recorder keeps as nodes: issue #25):
a real save of a small program calling both loads and computes eager's answer; crafted files naming them
with arguments their kernels would trust (an output size of 2^40, negative or traced sizes, tensors of the
wrong rank, other ops of the namespace, another call target) are refused with LoadError at load; a file
whose rois name an image outside the batch (torchvision's C++ kernel reads outside the input there) or
whose boxes are NaN loads and is refused by a GuardError before the kernel runs
(tracejit/serialize/custom_op_checks.py, op_sizes_vision.py)."""
from __future__ import annotations

import io
import os
import sys
import warnings

import pytest
import torch

import tracejit
from security_testlib import node, rewrite

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))
from torchvision_ops import import_torchvision  # noqa: E402

tv = import_torchvision()
pytestmark = pytest.mark.skipif(tv is None, reason="torchvision is not installed (make test installs it)")


def _pool(features, boxes, scores):
    """nms, then each kept box pooled from image 0 (the image index computed: ``x1 * 0``)."""
    kept = boxes[tv.ops.nms(boxes, scores, 0.5)]
    rois = torch.cat([kept[:, :1] * 0, kept], 1)
    return tv.ops.roi_align(features, rois, (3, 3), spatial_scale=0.5, sampling_ratio=2)


def _inputs(n: int, seed: int, size: int = 16):
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=gen) * size
    boxes = torch.cat([xy, xy + 4 + torch.rand(n, 2, generator=gen) * size], 1)
    return torch.randn(1, 8, size, size, generator=gen), boxes, torch.rand(n, generator=gen)


@pytest.fixture(scope="module")
def saved():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(_pool, _inputs(10, 0))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return buf.getvalue()


def _load(raw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.load(io.BytesIO(raw))


def test_a_saved_program_with_nms_and_roi_align_loads_and_gives_eager_answer(saved):
    loaded = _load(saved)
    new = [_inputs(25, 1, size=20), _inputs(4, 2)]
    outs = [_pool(*x) for x in new]
    assert outs[0].shape[0] != outs[1].shape[0], "the inputs must change how many boxes survive"
    for x, want in zip(new, outs):
        torch.testing.assert_close(loaded(*x), want, rtol=0, atol=0)


def _edit_node(prefix: str, which: int = 0, **changes):
    def edit(doc):
        n = [x for x in _nodes(doc) if x["op"].startswith(prefix)][which]
        for key, value in changes.items():
            if key == "arg":
                for i, v in value.items():
                    n["args"][i] = v
            else:
                n[key] = value
    return edit


def _nodes(doc):
    return [n for g in doc["program"]["graphs"] for n in g["nodes"]]


def _arg_of(doc, prefix: str, i: int):
    return node(doc, prefix)["args"][i]


ROI, NMS = "torchvision::roi_align", "torchvision::nms"
# name -> (edit of the document, what the LoadError says)
REFUSED_AT_LOAD = {
    "pooled_height_2_40": (_edit_node(ROI, arg={3: 2 ** 40}), "pooled_height = 1099511627776 is outside"),
    "pooled_width_negative": (_edit_node(ROI, arg={4: -3}), "pooled_width = -3 is outside"),
    "pooled_height_zero": (_edit_node(ROI, arg={3: 0}), "pooled_height = 0 is outside"),
    "pooled_height_traced": (_edit_node(ROI, arg={3: {"v": 0}}), "pooled_height must be a constant"),
    "pooled_1024_squared_over_budget": (_edit_node(ROI, arg={3: 1024, 4: 1024}), "would allocate"),
    "sampling_ratio_2_20": (_edit_node(ROI, arg={5: 2 ** 20}), "sampling_ratio = 1048576 is above"),
    "aligned_an_int": (_edit_node(ROI, arg={6: 7}), "expected a bool"),
    "spatial_scale_a_string": (_edit_node(ROI, arg={2: "x"}), "expected a float"),
    "rois_rank_1": (_edit_node(ROI, arg={1: {"v": 2}}), "rois must be a tensor of rank 2"),
    "input_rank_2": (_edit_node(ROI, arg={0: "ROIS"}), "input must be a tensor of rank 4"),
    "nms_boxes_rank_1": (_edit_node(NMS, arg={0: {"v": 2}}), "dets must be a tensor of rank 2"),
    "nms_scores_rank_2": (_edit_node(NMS, arg={1: {"v": 1}}), "scores must be a tensor of rank 1"),
    "nms_iou_a_tensor": (_edit_node(NMS, arg={2: {"v": 2}}), "iou_threshold must be a number"),
    "nms_overload": (_edit_node(NMS, op="torchvision::nms.out"), "no overload 'out'"),
    "ps_roi_align": (_edit_node(ROI, op="torchvision::ps_roi_align.default"), "not one of the custom ops"),
    "deform_conv2d": (_edit_node(ROI, op="torchvision::deform_conv2d.default"), "not one of the custom ops"),
    "other_namespace": (_edit_node(NMS, op="mmcv::nms.default"), "op namespace 'mmcv' is not allowed"),
    "target_roi_pool": (_edit_node(ROI, target="fn:torch.ops.torchvision.roi_pool"), "is called as"),
    "target_os_system": (_edit_node(NMS, target="fn:os.system"), "is called as"),
    "target_method": (_edit_node(NMS, target="method:nms"), "is called as"),
    "two_outputs": (lambda doc: node(doc, NMS)["outputs"].append(dict(node(doc, NMS)["outputs"][0])), "returns one tensor"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_AT_LOAD))
def test_crafted_files_naming_vision_ops_are_refused_at_load(saved, case):
    edit, fragment = REFUSED_AT_LOAD[case]

    def edit_doc(doc):
        if case == "input_rank_2":   # the rois' value (rank 2) where the rank-4 input goes
            _edit_node(ROI, arg={0: _arg_of(doc, ROI, 1)})(doc)
        else:
            edit(doc)

    raw = rewrite(saved, edit_doc=edit_doc)
    with pytest.raises(tracejit.LoadError, match=fragment.replace("(", r"\(")):
        _load(raw)


def _scaled_index(factor):
    """The image index column computed as ``x1 * factor`` instead of ``x1 * 0``."""
    return lambda doc: _edit_node("aten::mul", arg={1: factor})(doc)


def test_rois_outside_the_batch_or_nan_boxes_are_refused_before_the_kernel(saved):
    loaded = _load(rewrite(saved, edit_doc=_scaled_index(1000)))   # a valid program: it loads
    features, boxes, scores = _inputs(10, 3)
    assert bool((boxes[:, 0] * 1000 >= 1).all())
    with pytest.raises(tracejit.GuardError, match=r"roi_align's rois name an image outside the batch of 1"):
        loaded(features, boxes, scores)
    honest = _load(saved)
    nan_boxes = boxes.clone()
    nan_boxes[:, 1] = float("nan")
    with pytest.raises(tracejit.GuardError, match="NaN or infinite"):
        honest(features, nan_boxes, scores)
    torch.testing.assert_close(honest(features, boxes, scores), _pool(features, boxes, scores))


def test_a_process_without_the_reviewed_ops_refuses_the_file(saved, monkeypatch):
    """Where torchvision's nms is registered with another schema than the one tracejit reviewed (another
    torchvision), or not at all, the file is refused at load, saying what to import."""
    from tracejit.ops import custom
    schema, *rest = custom.KEPT[NMS]
    monkeypatch.setitem(custom.KEPT, NMS, (schema.replace("float iou_threshold", "float iou"), *rest))
    monkeypatch.setattr(custom, "_REGISTERED", set())
    with pytest.raises(tracejit.LoadError, match=r"calls torchvision::nms, which this process has not registered.*"
                                                 r"import torchvision"):
        _load(saved)
