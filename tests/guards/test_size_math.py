"""Float math on traced sizes is recorded (trace/symfloat.py) and sizes used as indices are guarded
(trace/index_reads.py): the counts of traces, the recorded ops, the file and ONNX export."""
from __future__ import annotations

import io
import os
import sys

import pytest
import torch

import tracejit
from size_math_patterns import BY_LENGTH, TFSamePad224, dict_lookup, pad_to_multiple, rounded_third
from trace_testlib import marker_lines, quiet, roundtrip

line_of = marker_lines(__import__("size_math_patterns").__file__)


def test_tf_same_padding_traced_at_224_runs_at_other_sizes_without_retrace():
    torch.manual_seed(0)
    m = TFSamePad224().eval()
    traced = quiet(tracejit.trace, m, (torch.randn(1, 1, 224, 224),))
    loaded = roundtrip(traced)
    shapes = set()
    for h, w in ((225, 225), (231, 160), (160, 231), (224, 224)):
        x = torch.randn(1, 1, h, w)
        expected = m(x)
        shapes.add(tuple(expected.shape))
        torch.testing.assert_close(traced(x), expected)
        torch.testing.assert_close(loaded(x), expected)   # no GuardError
    assert len(shapes) == 4
    assert traced._specializations.traces == 0 and len(traced.specializations) == 1
    ops = [n.op for n in traced.graph.nodes]
    assert "tracejit::sym_math" in ops and "aten::div.int" in ops
    assert not [n for n in traced.graph.nodes if n.op == "tracejit::guard" and n.attrs["kind"] == "size"]
    assert "_tj_sym.ceil(" in traced.code and "_tj_sym.max(" in traced.code


def test_torch_jit_trace_keeps_the_example_padding():
    torch.manual_seed(0)
    m = TFSamePad224().eval()
    jitted = quiet(torch.jit.trace, m, (torch.randn(1, 1, 224, 224),), check_trace=False)
    x = torch.randn(1, 1, 225, 225)
    assert jitted(x).shape != m(x).shape


def test_round_of_a_size_ratio_is_recorded():
    traced = quiet(tracejit.trace, rounded_third, (torch.randn(2, 9),))
    loaded = roundtrip(traced)
    for n in (10, 14, 4):
        x = torch.randn(2, n)
        torch.testing.assert_close(loaded(x), rounded_third(x))
    assert "_tj_sym.round(" in traced.code


def test_a_size_used_as_a_dict_key_is_guarded_at_the_line():
    traced = quiet(tracejit.trace, dict_lookup, (torch.randn(2, 3),))
    loaded = roundtrip(traced)
    x = torch.randn(2, 5)
    torch.testing.assert_close(quiet(traced, x), dict_lookup(x))   # retraced
    with pytest.raises(tracejit.GuardError) as info:
        loaded(x)
    assert info.value.source.lineno == line_of("dict_lookup")
    assert BY_LENGTH[3] != BY_LENGTH[5]
    same_length = torch.randn(4, 3)
    torch.testing.assert_close(loaded(same_length), dict_lookup(same_length))


def test_a_size_in_a_line_that_did_not_run_does_not_guard():
    """``None[...]`` on a branch not taken is no index read (the scanner skips non-containers)."""
    def fn(x, bias=None):
        n = x.size(1)
        if bias is not None:
            bias = bias[:, :n]
        return x * 2

    traced = quiet(tracejit.trace, fn, (torch.randn(2, 3),))
    assert not [g for g in traced.graph.nodes if g.op == "tracejit::guard" and g.attrs["kind"] == "size"]


def test_tampered_sym_math_function_is_a_load_error():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "capture"))
    from capture_testlib import nodes_of, tampered
    traced = quiet(tracejit.trace, pad_to_multiple, (torch.randn(2, 16),))

    def edit(doc):
        next(n for n in nodes_of(doc) if n["op"] == "tracejit::sym_math")["attrs"]["fn"] = "__import__"
    with pytest.raises(tracejit.LoadError, match="sym_math function '__import__' is not one of"):
        tracejit.load(io.BytesIO(tampered(traced, edit)))


@pytest.mark.parametrize("fn, example, new", [
    (TFSamePad224, (1, 1, 224, 224), [(1, 1, 225, 231), (1, 1, 160, 224)]),
    (pad_to_multiple, (2, 16), [(2, 17), (3, 3)]),
    (rounded_third, (2, 9), [(2, 10), (2, 14)]),
], ids=["tf_same_pad", "pad_to_multiple", "round"])
def test_onnx_export_keeps_the_size_math_dynamic(fn, example, new):
    """Exported with export/sym_lowering.py: onnxruntime gives eager's answer at other sizes."""
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = fn().eval() if isinstance(fn, type) else fn
    traced = quiet(tracejit.trace, model, (torch.randn(*example),))
    session = ort.InferenceSession(tracejit.export_onnx(traced).SerializeToString())
    name = session.get_inputs()[0].name
    for shape in [example] + new:
        x = torch.randn(*shape)
        got = torch.from_numpy(session.run(None, {name: x.numpy()})[0])
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
