"""An input's batch fixed by the program (torchvision's detectors take ``list(images.unbind(0))`` and unroll one branch
per image) makes the exported model take that batch only; onnxruntime refuses another with "Got invalid dimensions
... index: 0 Got: 2 Expected: 1", which names no line. export_onnx now warns naming the guard that fixed it (the
unbind and its line) and how to export per batch size, and lists it in the metadata ``tracejit.pinned_batches``.
(breadth26: SSDLite320 / FCOS's raw ONNX failed on batch 2 with onnxruntime's message alone.)"""
from __future__ import annotations

import pytest
import torch

import tracejit
from tracejit import TracerWarning

ort = pytest.importorskip("onnxruntime")


def per_image(images):
    return torch.stack([im.mean(0) * 2 for im in images.unbind(0)])


def _x(batch, size, seed=0):
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def test_export_names_the_unbind_that_fixes_the_batch():
    traced = tracejit.trace(per_image, _x(1, 8))
    with pytest.warns(TracerWarning, match=r"input 'images' dimension 0 \(its batch\) is fixed to 1: .*unbind.*"
                                           r"test_pinned_batch_warning.py:\d+.*Export one model per batch size"):
        proto = tracejit.export_onnx(traced)
    meta = {p.key: p.value for p in proto.metadata_props}
    assert "unbind" in meta["tracejit.pinned_batches"]
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    x = _x(1, 12, seed=1)   # the traced batch, another image size: eager's answer
    torch.testing.assert_close(torch.from_numpy(session.run(None, {"images": x.numpy()})[0]), per_image(x))
    with pytest.raises(Exception, match="index: 0"):   # another batch: refused, not answered
        session.run(None, {"images": _x(2, 8).numpy()})


def test_a_dynamic_batch_gives_no_warning():
    import warnings
    traced = tracejit.trace(lambda x: x.mean(1) * 2, _x(1, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", TracerWarning)
        proto = tracejit.export_onnx(traced)
    assert "tracejit.pinned_batches" not in {p.key for p in proto.metadata_props}
