"""The size reads torchvision's detection models make (issue #25 item 1), recorded so that a program built without
the original (a loaded file, ONNX) follows the image size: ``min`` / ``max`` of a shape, ``torch.sym_int`` (the
resize's ``int(h * scale)`` in F.interpolate), ``torch.tensor(size, dtype=torch.float32)`` (no guard on the
``float()`` torch's C++ reads: the op is recorded with the size), chained float math on sizes, and ``float()`` /
``int()`` in the reviewed modules of trace/float_reads.py (default-deny: elsewhere they stay guarded)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import float_read_patterns
import tracejit
from trace_testlib import marker_lines, quiet, roundtrip

from tracejit.trace import float_reads

line_of = marker_lines(float_read_patterns.__file__)


def resize_like_detection(x):
    h, w = x.shape[-2:]
    scale = min(16 / min(x.shape[-2:]), 24 / max(x.shape[-2:]))
    y = F.interpolate(x, scale_factor=scale, mode="bilinear", recompute_scale_factor=True, align_corners=False)
    ratio = torch.tensor(y.shape[-1], dtype=torch.float32) / torch.tensor(w, dtype=torch.float32)
    return y * ratio, x.new_ones(torch.sym_int(h / 3 / 2.0))


def _size_guards(traced):
    return [n for n in traced.inlined_graph.nodes if n.op == "tracejit::guard" and n.attrs["kind"] == "size"]


def test_resize_like_the_detection_transform_follows_the_image_size():
    example = torch.rand(1, 3, 16, 20)
    traced = quiet(tracejit.trace, resize_like_detection, (example,))
    assert not _size_guards(traced)
    loaded = roundtrip(traced)   # no original: a guard would raise
    reference = quiet(torch.jit.trace, resize_like_detection, (example,), check_trace=False)
    shapes = set()
    for size in ((32, 40), (36, 90), (30, 12), (9, 9)):
        x = torch.rand(1, 3, *size)
        want = resize_like_detection(x)
        shapes.add(tuple(want[0].shape))
        for got in (traced(x), loaded(x)):
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, rtol=0, atol=0)
        assert reference(x)[1].shape != want[1].shape   # torch.jit.trace keeps the example's int(h / 3 / 2.0)
    assert len(shapes) == 4 and traced._specializations.traces == 0


def test_float_and_int_of_sizes_are_recorded_in_the_reviewed_modules(monkeypatch):
    monkeypatch.setitem(float_reads.MODULES, float_read_patterns.__name__, "test: pads as batch_images does")
    traced = quiet(tracejit.trace, float_read_patterns.pad_to_stride, (torch.rand(2, 10),))
    assert not _size_guards(traced)
    loaded = roundtrip(traced)
    for n in (3, 16, 17, 10):
        x = torch.rand(2, n)
        torch.testing.assert_close(loaded(x), float_read_patterns.pad_to_stride(x), rtol=0, atol=0)
    assert float_reads.traced_float not in vars(float_read_patterns).values(), "the stand-ins are gone after tracing"


def test_float_of_a_size_stays_guarded_in_other_modules():
    traced = quiet(tracejit.trace, float_read_patterns.pad_to_stride, (torch.rand(2, 10),))
    loaded = roundtrip(traced)
    x = torch.rand(2, 10)
    torch.testing.assert_close(loaded(x), float_read_patterns.pad_to_stride(x), rtol=0, atol=0)
    with pytest.raises(tracejit.GuardError, match=f"float_read_patterns.py:{line_of('pad_to_stride')}"):
        loaded(torch.rand(2, 12))
