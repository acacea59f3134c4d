"""A 0-d integer tensor where an op takes an int (``torch.div`` of two sizes is a tensor, and Python's argument
parser takes it as an int): the trace records the parser's conversion, ``aten::item``, and the op takes that int
(trace/int_tensors.py). transformers' Longformer / LED chunk with
``x.view(x.size(0), torch.div(x.size(1), 2 * w, rounding_mode="trunc"), 2 * w, x.size(2))``: the trace recorded the
tensor as a size of ``view``, no schema bound it, and ``save`` refused the program."""
from __future__ import annotations

import io
import warnings

import torch

import tracejit


def chunked(x):
    return x.view(x.size(0), torch.div(x.size(1), 4, rounding_mode="trunc"), 4, x.size(2)).sum(2)


def zeros_of_half(x):
    half = torch.div(x.size(1), 2, rounding_mode="floor")
    return x.new_zeros((x.size(0), half + 1)) + x[:, :1]


def scaled(x):
    return x / torch.div(x.size(1), 2, rounding_mode="floor")   # where div takes a tensor: stays a tensor


def _round_trip(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


def test_sizes_from_tensor_division_save_load_and_follow_the_input():
    for fn, example, news in ((chunked, torch.randn(2, 8, 3), [torch.randn(3, 16, 3), torch.randn(1, 4, 5)]),
                              (zeros_of_half, torch.randn(2, 6), [torch.randn(3, 10), torch.randn(1, 3)]),
                              (scaled, torch.randn(2, 6), [torch.randn(3, 10)])):
        traced = tracejit.trace(fn, example)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jit = torch.jit.trace(fn, example)
        loaded = _round_trip(traced)
        for x in news:
            want = fn(x)
            assert torch.equal(traced(x), want), fn.__name__
            assert torch.equal(loaded(x), want), fn.__name__
            assert torch.equal(jit(x), want), fn.__name__   # torch.jit: its sizes are tensors too
        assert len(traced.specializations) == 1


def test_the_conversion_is_recorded_only_where_the_op_takes_an_int():
    assert ".item()" in tracejit.trace(chunked, torch.randn(2, 8, 3)).code
    assert ".item()" not in tracejit.trace(scaled, torch.randn(2, 6)).code


def test_the_read_exports_to_onnx():
    ort = __import__("pytest").importorskip("onnxruntime")
    traced = tracejit.trace(chunked, torch.randn(2, 8, 3))
    session = ort.InferenceSession(tracejit.export_onnx(traced).SerializeToString(), providers=["CPUExecutionProvider"])
    x = torch.randn(3, 16, 3)
    got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
    torch.testing.assert_close(got, chunked(x))
