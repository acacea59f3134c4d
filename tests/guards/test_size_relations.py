"""Sizes compared with each other guard the relation (hunt28, breadth27's DPT / Depth Anything item): new batches and
image sizes where the relation holds run the one specialization (live, loaded, the onnxruntime backend), and a
relation that flips gives eager's answer (a re-trace) or, loaded, a GuardError naming the line; never the trace's
branch silently. A pin: these held before this round too (hunt27's bool() and the comparison guards)."""
from __future__ import annotations

import pytest
import torch

import tracejit
import size_relation_patterns as pats
from trace_testlib import marker_lines, quiet, roundtrip

line_of = marker_lines(pats.__file__)


def _fuse_inputs(b, h, rh=None):
    return torch.randn(b, 4, h, h), torch.randn(b, 4, rh or h, rh or h)


def test_equal_shapes_serve_new_batches_and_sizes_with_one_trace():
    torch.manual_seed(0)
    m = pats.FuseIfShapesDiffer().eval()
    traced = quiet(tracejit.trace, m, _fuse_inputs(1, 4))
    loaded = roundtrip(traced)
    for b, h in ((2, 4), (3, 6), (1, 9)):
        x = _fuse_inputs(b, h)
        torch.testing.assert_close(traced(*x), m(*x))
        torch.testing.assert_close(loaded(*x), m(*x))
    assert len(traced.specializations) == 1
    assert not [n for n in traced.graph.nodes if n.op == "tracejit::guard" and n.attrs["kind"] == "size"
                and not any(isinstance(o, tracejit.ir.Value) for o in n.args[1:])]   # no size compared with a number


def test_a_relation_that_flips_gives_eager_or_a_named_guard():
    torch.manual_seed(0)
    m = pats.FuseIfShapesDiffer().eval()
    traced = quiet(tracejit.trace, m, _fuse_inputs(1, 4))
    loaded = roundtrip(traced)
    x = _fuse_inputs(2, 6, rh=3)   # the residual is smaller now: eager interpolates
    torch.testing.assert_close(quiet(traced, *x), m(*x))
    with pytest.raises(tracejit.GuardError) as err:
        loaded(*x)
    assert err.value.source.lineno == line_of("shapes_differ")


def test_an_order_between_sizes_is_guarded_as_an_order():
    m = pats.CropToShorter()
    traced = quiet(tracejit.trace, m, (torch.randn(5), torch.randn(3)))
    loaded = roundtrip(traced)
    for a, b in ((7, 2), (4, 3)):   # still longer: the same trace
        x = (torch.randn(a), torch.randn(b))
        torch.testing.assert_close(loaded(*x), m(*x))
    x = (torch.randn(2), torch.randn(3))
    torch.testing.assert_close(quiet(traced, *x), m(*x))
    with pytest.raises(tracejit.GuardError) as err:
        loaded(*x)
    assert err.value.source.lineno == line_of("longer")


def test_onnxruntime_backend_serves_new_batches_of_the_relation():
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    m = pats.FuseIfShapesDiffer().eval()
    traced = quiet(tracejit.trace, m, _fuse_inputs(1, 4))
    ort = quiet(tracejit.optimize_for_inference, traced, backend="onnxruntime")
    for b, h in ((3, 4), (2, 7)):
        x = _fuse_inputs(b, h)
        torch.testing.assert_close(ort(*x), m(*x), atol=1e-5, rtol=1e-5)
    assert ort.handed_over == 0
    x = _fuse_inputs(2, 6, rh=3)
    torch.testing.assert_close(quiet(ort, *x), m(*x), atol=1e-5, rtol=1e-5)   # handed to the torch program


def test_dpt_fusion_layer_new_batches_and_a_flip():
    transformers = pytest.importorskip("transformers")
    from transformers.models.dpt.modeling_dpt import DPTFeatureFusionLayer
    torch.manual_seed(0)
    cfg = transformers.DPTConfig(fusion_hidden_size=8)
    m = DPTFeatureFusionLayer(cfg).eval()
    ex = (torch.randn(1, 8, 4, 4), torch.randn(1, 8, 4, 4))
    traced = quiet(tracejit.trace, m, ex)
    with torch.no_grad():
        for b, h in ((2, 4), (3, 5)):
            x = (torch.randn(b, 8, h, h), torch.randn(b, 8, h, h))
            torch.testing.assert_close(traced(*x), m(*x))
        assert len(traced.specializations) == 1
        x = (torch.randn(2, 8, 6, 6), torch.randn(2, 8, 3, 3))   # unequal: eager interpolates the residual
        torch.testing.assert_close(quiet(traced, *x), m(*x))


def test_mobilenet_v2_hf_new_batch_one_trace_new_image_size_eager_or_named():
    """``int(features.shape[-2])`` (apply_tf_padding) pins H and W: CPython copies what ``__int__`` returns into a
    plain int, so the read is a value guard (trace/symbolic.py). New batches: the one trace; a new image size: eager's
    answer (a re-trace) live, a GuardError naming the int() line loaded."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.mobilenet_v2 import modeling_mobilenet_v2 as mm
    torch.manual_seed(0)
    m = transformers.MobileNetV2Model(transformers.MobileNetV2Config(depth_multiplier=0.35, num_channels=3)).eval()
    f = lambda x: m(pixel_values=x).last_hidden_state   # noqa: E731
    with torch.no_grad():
        traced = quiet(tracejit.trace, f, (torch.randn(1, 3, 64, 64),))
        loaded = roundtrip(traced)
        x = torch.randn(3, 3, 64, 64)
        torch.testing.assert_close(traced(x), f(x))
        torch.testing.assert_close(loaded(x), f(x))
        assert len(traced.specializations) == 1
        x = torch.randn(1, 3, 96, 96)
        torch.testing.assert_close(quiet(traced, x), f(x))
        with pytest.raises(tracejit.GuardError) as err:
            loaded(x)
    assert err.value.source.filename == mm.__file__ and "int(features.shape" in \
        open(mm.__file__).read().splitlines()[err.value.source.lineno - 1]
