"""torchvision's detection models trace (issue #25 item 5): the ImageList that GeneralizedRCNNTransform
returns is traced through in place (trace/through.py), and on other image sizes and image counts the traced
program gives eager's boxes, scores, labels and masks (retraced), or, loaded from a file or without its
original, a GuardError naming the line of torchvision that pinned the size or count.
(tests/trace/test_traced_through.py compares with torch.jit.trace.)
``torchvision::nms`` / ``roi_align`` are recorded as one node each (tracejit/ops/custom.py), so Faster R-CNN
exports to ONNX (NonMaxSuppression, RoiAlign: tests/export/test_vision_ops_export.py) and gives eager's
detections in onnxruntime on new images; saved files may name them (serialize/custom_op_checks.py: a
process that has torchvision's ops registered loads them; hostile files: tests/security/test_vision_op_files.py)."""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys
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
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
    from torchvision.ops import MultiScaleRoIAlign
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                             nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
    backbone.out_channels = 16
    anchors = AnchorGenerator(sizes=((16, 32),), aspect_ratios=((0.5, 1.0, 2.0),))
    common = dict(min_size=64, max_size=96, anchor_generator=anchors) if kind == "retinanet" else \
        dict(min_size=64, max_size=96, rpn_anchor_generator=anchors, box_score_thresh=0.0,
             rpn_pre_nms_top_n_test=30, rpn_post_nms_top_n_test=12, box_detections_per_img=6,
             box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2), box_head=TwoMLPHead(16 * 7 * 7, 32),
             box_predictor=FastRCNNPredictor(32, 4))
    if kind == "fasterrcnn":
        return detection.FasterRCNN(backbone, **common).eval()
    if kind == "maskrcnn":
        return detection.MaskRCNN(backbone, mask_roi_pool=MultiScaleRoIAlign(["0"], 14, 2),
                                  mask_head=MaskRCNNHeads(16, (16, 16), 1),
                                  mask_predictor=MaskRCNNPredictor(16, 16, 4), **common).eval()
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


@pytest.mark.slow
def test_faster_rcnn_exports_and_gives_eager_detections_on_new_images():
    """In onnxruntime, on new images of the traced size (other boxes survive nms) and of other sizes, landscape
    and portrait, smaller and larger (the transform resizes them to other sizes, or to the traced one): eager's
    detections, with every guard kept. The transform's size arithmetic is recorded (``min(im_shape)``, the
    resize's ``int(h * scale)`` through ``torch.sym_int``, the padding's ``float(size)``: trace/float_reads.py,
    ``torch.tensor(size)``), so the ONNX model computes it per call; the pooler's level scale
    (``float(torch.tensor(h / H).log2().round())``) is a value guard computed from sizes alone, checked by the
    onnxruntime program before each run (export/guards.py). torch.jit.trace's ONNX needs torchvision's
    ``_is_tracing()`` paths, which compute the scale in float32 (another rounding than eager's)."""
    pytest.importorskip("onnxruntime")
    model = AsTuple(_detector("fasterrcnn")).eval()
    example = _images((64, 80))
    new = [[torch.rand(3, 64, 80, generator=torch.Generator().manual_seed(seed))] for seed in (7, 8)]
    new += [_images(size) for size in ((96, 120), (56, 90), (80, 64), (40, 44))]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (example,), check_trace=False)
        assert {n.op for n in traced.inlined_graph.nodes} >= {"torchvision::nms.default", "torchvision::roi_align.default"}
        onnx_model = tracejit.export_onnx(traced)
        dims = onnx_model.graph.input[0].type.tensor_type.shape.dim
        assert not any(d.HasField("dim_value") for d in dims[1:]), "height and width follow the call"
        program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
        wants = [model(images) for images in new]
        assert not torch.equal(wants[0][0], wants[1][0]), "the images must move the boxes"
        for images, want in zip(new, wants):
            got = program(images)
            assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-4)


def _spread_retinanet():
    """The small RetinaNet with a classification head whose scores spread (torchvision's init gives every anchor
    ~0.01: ties, whose order is any runtime's choice) and a score threshold some images do not reach."""
    model = _detector("retinanet")
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for conv in model.head.classification_head.modules():
            if isinstance(conv, nn.Conv2d):
                conv.weight.normal_(0, 0.1, generator=gen)
                conv.bias.zero_()
    model.score_thresh = 0.61
    return model


def _guard_flags(session, proto, images):
    """(the model's outputs, its guard outputs) in onnxruntime."""
    names = [o.name for o in proto.graph.output]
    results = session.run(None, {proto.graph.input[0].name: images[0].numpy()})
    flags = [bool(r) for n, r in zip(names, results) if n.startswith("tracejit_guard_")]
    return [torch.from_numpy(r) for n, r in zip(names, results) if not n.startswith("tracejit_guard_")], flags


# kind -> (images where the guards hold: other pixel values, same size; an image where eager takes another branch,
# the line named). RetinaNet: ``boxes.numel() == 0`` after ``scores > score_thresh`` (a boolean-mask index: a
# data-dependent size), False where no score passes; Mask R-CNN: ``int(box[2] - box[0] + 1)`` when pasting masks
GUARDED = {"retinanet": (lambda x: [[x * 0.9], [x * 0.2]], lambda x: [x.flip(-1)], r"boxes\.py:\d+"),
           "maskrcnn": (lambda x: [[x + 1e-4 * torch.rand(x.shape, generator=torch.Generator().manual_seed(1))]],
                        lambda x: [torch.rand(x.shape, generator=torch.Generator().manual_seed(2))],
                        r"roi_heads\.py:\d+")}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["retinanet", "maskrcnn"])
def test_detection_exports_with_guard_outputs(kind):
    """RetinaNet and Mask R-CNN export with ``guard_outputs=True`` (export/guard_outputs.py): in onnxruntime, on new
    images where the guards hold, eager's boxes, scores, labels (and masks); on an image where eager takes another
    branch a guard output is False, and the onnxruntime program of a trace without its original (a loaded one)
    raises the GuardError naming torchvision's line. By default Mask R-CNN's value guards refuse the export naming
    the option."""
    pytest.importorskip("onnxruntime")
    import onnx
    import onnxruntime as ort
    from tracejit.backends.guard_outputs import guards_only
    from tracejit.export.errors import ExportError
    detector = _spread_retinanet() if kind == "retinanet" else _detector(kind)
    model = AsTuple(detector).eval()
    example = _images((64, 80))
    held, broken, line = GUARDED[kind]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (example,), check_trace=False)
        traced.drop_original()   # as a loaded program: where a guard fails, the GuardError, no new trace
        if kind == "maskrcnn":
            with pytest.raises(ExportError, match=r"tensor values \(int\(tensor\) in `.*guard_outputs=True"
                                                  r".*roi_heads\.py:\d+"):
                tracejit.export_onnx(traced)
        proto = tracejit.export_onnx(traced, guard_outputs=True)
        session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
        first = model(example)
        for images in held(example[0]):
            want = model(images)
            assert len(want[0]) and any(w.shape != f.shape or not torch.equal(w, f) for w, f in zip(want, first)), \
                "the images move the detections"
            got, flags = _guard_flags(session, proto, images)
            assert flags and all(flags)
            for outs in (got, program(images)):
                assert [tuple(g.shape) for g in outs] == [tuple(w.shape) for w in want]
                for g, w in zip(outs, want):
                    torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-4)
        images = broken(example[0])
        # the guard outputs alone (the traced branch's shapes may not fit an image where a guard fails)
        names = [o.name for o in proto.graph.output if o.name.startswith("tracejit_guard_")]
        alone = onnx.load_from_string(guards_only(proto.SerializeToString(), names))
        session = ort.InferenceSession(alone.SerializeToString(), providers=["CPUExecutionProvider"])
        assert not all(_guard_flags(session, alone, images)[1])
        with pytest.raises(tracejit.GuardError, match=f"guard failed at \\S+{line}"):
            program(images)


@pytest.mark.slow
def test_openvino_mask_rcnn_hands_refused_shapes_to_the_traced_program():
    """Mask R-CNN's OpenVINO program on an image whose boxes move a pasted mask's traced size: OpenVINO's shape
    inference refuses the call's shapes before any run; its guard outputs, computed alone, are False, so the
    traced program answers (a live one traces again: eager's detections); without the original, the GuardError
    naming torchvision's line. The refusal itself was raised as a RuntimeError before."""
    pytest.importorskip("openvino")
    model = AsTuple(_detector("maskrcnn")).eval()
    example = _images((64, 80))
    _, broken, line = GUARDED["maskrcnn"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (example,), check_trace=False)
        program = tracejit.optimize_for_inference(traced, backend="openvino")
        for images in (broken(example[0]), _images((72, 96))):
            want = model(images)
            got = program(images)
            assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=0, atol=0)   # the traced program's (torch's) answer
        # the refusal path itself (the zoo's maskrcnn_resnet50_fpn at 112 px meets it; this small one runs and
        # fails instead): refused shapes are the traced program's, whose guards decide
        def refuse(tensors, shapes):
            raise program._run_error(tensors, RuntimeError("shape inference refused"))
        program._shapes_ok.clear()
        program._check_shapes = refuse
        images = [b * 0.5 + b.flip(-2) * 0.5 for b in broken(example[0])]
        want = model(images)
        for g, w in zip(program(images), want):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        for g, w in zip(program(example), model(example)):   # every guard holds: still the traced program's answer
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        fresh = tracejit.trace(model, (example,), check_trace=False)
        fresh.drop_original()
        program = tracejit.optimize_for_inference(fresh, backend="openvino")
        with pytest.raises(tracejit.GuardError, match=f"guard failed at \\S+{line}"):
            program(broken(example[0]))


def _flat(out):
    return [t for o in out for t in o.values()] if isinstance(out, list) else list(out)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fasterrcnn", "retinanet", "maskrcnn"])
def test_detection_traces_and_follows_new_image_sizes(kind):
    model = AsTuple(_detector(kind)).eval()
    example, new = _images((64, 64), (60, 80)), _images((56, 90), (70, 50))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = model(new)
        assert not all(torch.equal(a, b) for a, b in zip(want, model(example))), "the images must move the boxes"
        traced = tracejit.trace(model, (example,), check_trace=False)
        program = tracejit.optimize_for_inference(traced)   # built before any retrace: it holds one trace
        got = traced(new)
        # Mask R-CNN pastes each mask at int(box[2] - box[0]), a read of the boxes' values: the optimized
        # program's guard fails and the live traced object answers (backends/fallback.py hand_over); the
        # others' size arithmetic is recorded, so the optimized program answers itself
        for g, w in zip(program(new), want, strict=True):
            torch.testing.assert_close(g, w)
        if kind == "maskrcnn":   # without the original: the GuardError naming torchvision's line
            traced.drop_original()
            with pytest.raises(tracejit.GuardError, match=r"roi_heads\.py:\d+ `[wh] = int\(box"):
                program(_images((90, 56), (50, 70)))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.slow
def test_detection_traces_with_the_default_check_as_torch_jit_trace_does():
    """torch.jit.trace(model, example) checks its trace by default and passes on a detector; tracejit's check used
    to fail it: MultiScaleRoIAlign sets its ``scales`` up on the first call, and the checker's retrace took the
    cached path. The retrace now starts from the state before that set-up (tracejit/api.py, _checker_retrace)."""
    model = AsTuple(_detector("fasterrcnn")).eval()
    example, new = _images((64, 64), (60, 80)), _images((56, 90), (70, 50))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(model, (example,))
        model.model.roi_heads.box_roi_pool.scales = None   # each trace starts from a fresh pooler
        model.model.roi_heads.box_roi_pool.map_levels = None
        traced = tracejit.trace(model, (example,))   # check_trace on
        assert model.model.roi_heads.box_roi_pool.scales is not None   # the first call's set-up, as in eager
        want = model(new)
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


def _new_content(*sizes):
    """Other images of the given sizes (other pixels: other boxes survive nms)."""
    gen = torch.Generator().manual_seed(99)
    return [torch.rand(3, h, w, generator=gen) for h, w in sizes]


class Batched(AsTuple):
    """The detector called on a batch tensor [N, 3, H, W] (its images as a list): the image count is a size."""

    def forward(self, images):
        return super().forward(list(images.unbind(0)))


def _batch(n, h, w, seed=5):
    return torch.rand(n, 3, h, w, generator=torch.Generator().manual_seed(seed))


KINDS = ["fasterrcnn", "retinanet", "maskrcnn"]


@pytest.fixture(scope="module")
def batched():
    """{kind: (the Batched detector, its trace on two 64 x 80 images, the trace's file as saved right after
    tracing)}: one trace per detector for the tests below (a later call that retraces adds a specialization
    to the live trace, not to the bytes)."""
    out = {}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in KINDS:
            model = Batched(_detector(kind))
            traced = tracejit.trace(model, (_batch(2, 64, 80),), check_trace=False)
            buf = io.BytesIO()
            traced.save(buf)
            out[kind] = model, traced, buf.getvalue()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_new_image_count_side_by_side_with_torch_jit_trace(kind, batched):
    """On another image count (a batch tensor of 3 images where 2 were traced): the traced program gives
    eager's answer (the ``unbind`` of the batch guards its count, trace/pieces.py, and a failed guard
    retraces); torch.jit.trace fails deep inside its TorchScript interpreter. On another image size
    torch.jit.trace follows the sizes (torchvision takes its ONNX-friendly paths when torch.jit traces), as
    tracejit does by retracing (test_detection_traces_and_follows_new_image_sizes). Loaded from a file:
    test_saved_detectors_in_a_fresh_process."""
    model, traced, _ = batched[kind]
    example, other_size, other_count = _batch(2, 64, 80), _batch(2, 56, 90), _batch(3, 64, 80)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.jit.trace(model, (example,), check_trace=False)
        want = model(other_count)
        assert len(want) == 3 * len(model(example)) // 2
        for g, w in zip(traced(other_count), want, strict=True):
            torch.testing.assert_close(g, w)
        with pytest.raises(RuntimeError, match="TorchScript interpreter"):
            reference(other_count)
        for g, w in zip(reference(other_size), model(other_size), strict=True):
            torch.testing.assert_close(g, w)


_FRESH = """
import sys, torch, tracejit
sys.path.insert(0, sys.argv[1])
from torchvision_ops import import_torchvision
import_torchvision()
data = torch.load(sys.argv[2])
out = {}
with torch.no_grad():
    for kind in data["kinds"]:
        loaded = tracejit.load(sys.argv[3] + "/" + kind + ".tjt")
        for name, images in data["images"].items():
            try:
                out[kind, name] = loaded(images)
            except tracejit.GuardError as e:
                out[kind, name] = str(e)
torch.save(out, sys.argv[2])
"""


@pytest.mark.slow
def test_saved_detectors_in_a_fresh_process(tmp_path, batched):
    """Saved, then loaded in a process that registers torchvision's ops: on new images of the traced sizes
    and of another size eager's detections (the transform's size arithmetic is recorded; Mask R-CNN: a
    GuardError naming the line where torchvision pastes each mask with ``int(box[2] - box[0])``, a read of the
    boxes' values, so its masks are right only for the traced boxes); on another image count a GuardError
    naming the line that pinned it."""
    kinds = KINDS
    images = {"example": _batch(2, 64, 80), "new_pixels": _batch(2, 64, 80, seed=6),
              "other_size": _batch(2, 56, 90), "other_count": _batch(3, 64, 80)}
    want = {}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in kinds:
            model, _, raw = batched[kind]
            (tmp_path / f"{kind}.tjt").write_bytes(raw)
            want[kind] = {name: model(x) for name, x in images.items()}
    assert not torch.equal(want["fasterrcnn"]["example"][0], want["fasterrcnn"]["new_pixels"][0])
    torch.save({"kinds": kinds, "images": images}, tmp_path / "io.pt")
    proc = subprocess.run([sys.executable, "-c", _FRESH, os.path.dirname(__file__), str(tmp_path / "io.pt"),
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = torch.load(tmp_path / "io.pt")
    masks = r"roi_heads\.py:\d+ `[wh] = int\(box\[[23]\] - box\[[01]\]"
    guarded = {("maskrcnn", "new_pixels"): masks, ("maskrcnn", "other_size"): masks,
               "other_count": r"test_detection\.py:\d+ `.*unbind"}
    for kind in kinds:
        for name in images:
            line = guarded.get((kind, name), guarded.get(name))
            if line is None:
                assert len(got[kind, name]) == len(want[kind][name])
                for g, w in zip(got[kind, name], want[kind][name]):
                    torch.testing.assert_close(g, w)
            else:
                assert re.search(r"guard failed at \S+" + line, got[kind, name]), (kind, name, got[kind, name])


class TwoLevels(nn.Module):
    """A two-conv backbone with a second, coarser feature map: the pooler maps each region to a level and counts
    them with ``num_rois = len(rois)`` (torchvision's poolers.py)."""

    out_channels = 16

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.down = nn.Conv2d(16, 16, 3, stride=2, padding=1)

    def forward(self, x):
        f = self.body(x)
        return {"0": f, "1": self.down(f)}


def _two_level_mask_rcnn():
    """The small Mask R-CNN on two levels, keeping every region nms keeps of the best 40 per level (~65 on a
    64 x 80 image; the count follows the pixels)."""
    from torchvision.models import detection
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
    from torchvision.ops import MultiScaleRoIAlign
    torch.manual_seed(0)
    return detection.MaskRCNN(
        TwoLevels(), min_size=64, max_size=96, box_score_thresh=0.0, box_detections_per_img=6,
        rpn_anchor_generator=AnchorGenerator(sizes=((16,), (32,)), aspect_ratios=((0.5, 1.0, 2.0),) * 2),
        rpn_pre_nms_top_n_test=40, rpn_post_nms_top_n_test=80,
        box_roi_pool=MultiScaleRoIAlign(["0", "1"], 5, 1), box_head=TwoMLPHead(16 * 5 * 5, 32),
        box_predictor=FastRCNNPredictor(32, 4), mask_roi_pool=MultiScaleRoIAlign(["0", "1"], 8, 1),
        mask_head=MaskRCNNHeads(16, (16, 16), 1), mask_predictor=MaskRCNNPredictor(16, 16, 4)).eval()


def _patched(image, corner, size, seed):
    """``image`` with a ``size`` x ``size`` square of other pixels in one corner (top-right / bottom-right)."""
    out = image.clone()
    rows = slice(0, size) if corner == "top" else slice(-size, None)
    out[:, rows, -size:] = torch.rand(3, size, size, generator=torch.Generator().manual_seed(seed))
    return out


@pytest.mark.slow
def test_region_count_follows_the_image_without_the_original():
    """The pooler's ``len(rois)`` is the region count the image gave (trace/len_reads.py): loaded from a file
    (no original to retrace) and in onnxruntime, images whose count differs from the traced one give eager's
    boxes, labels, scores and masks (before: GuardError at poolers.py ``num_rois = len(rois)``); an image whose
    boxes move the pasted masks' pixel sizes raises the GuardError naming roi_heads.py's ``int(box[2] -
    box[0])``, a real read of the boxes' values."""
    pytest.importorskip("onnxruntime")
    detector = _two_level_mask_rcnn()
    model = AsTuple(detector).eval()
    example = [torch.rand(3, 64, 80, generator=torch.Generator().manual_seed(5))]
    images = [_patched(example[0], "bottom", 6, 101)]
    moved = [torch.rand(3, 64, 80, generator=torch.Generator().manual_seed(6))]   # other boxes: other mask sizes
    counts = []
    hook = detector.roi_heads.box_roi_pool.register_forward_pre_hook(lambda _, a: counts.append(len(a[1][0])))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first, want = model(example), model(images)
        hook.remove()   # (a hook runs inside the trace)
        assert counts[0] != counts[1], "the image gives another region count"
        assert any(not torch.equal(w, f) for w, f in zip(want, first)), "the image moves the detections"
        traced = tracejit.trace(model, (example,), check_trace=False)
        buf = io.BytesIO()
        traced.save(buf)
        buf.seek(0)
        loaded = tracejit.load(buf)
        program = tracejit.optimize_for_inference(loaded, backend="onnxruntime")
        for got in (loaded(images), program(images)):
            assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-4)
        for run in (loaded, program):
            with pytest.raises(tracejit.GuardError, match=r"roi_heads\.py:\d+ `[wh] = int\(box"):
                run(moved)
    assert traced._specializations.traces == 0
