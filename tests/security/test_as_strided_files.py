"""``aten::as_strided`` in files (transformers' Longformer / LED make overlapping attention chunks with it). It was
refused as a raw-storage op; it is allowed with a size rule (serialize/op_sizes_strided.py) that holds the view
within its input's own elements, at load on the traced shapes and before every call. A view could otherwise read
the rest of its input's storage (ATen checks only the storage's bounds): an input that is one caller's slice of a
bigger batch would hand the file the other rows. Hostile rows are real saves, edited, CRC recomputed."""
from __future__ import annotations

import io
import warnings

import pytest
import torch

import tracejit
from security_testlib import graphs, rewrite, traced_bytes


def overlapping_chunks(x):
    """Longformer's ``_chunk``: chunks of 2w rows, each starting w rows after the last (w = 2)."""
    b, n, d = x.shape
    x = x.view(b, n // 4, 4, d)
    size = list(x.size())
    size[1] = size[1] * 2 - 1
    stride = list(x.stride())
    stride[1] = stride[1] // 2
    return x.as_strided(size=size, stride=stride) * 2


def tail_view(x):
    """A view of a slice, one element past the slice's start."""
    y = x[1:]
    return y.as_strided((2, 3), (3, 1), y.storage_offset() + 1) + 0


def _save(fn, example) -> bytes:
    return traced_bytes(fn, example)


def _strided(doc):
    return [n for g in graphs(doc) for n in g["nodes"] if n["op"].startswith("aten::as_strided")][0]


def test_overlapping_chunks_save_load_and_serve_new_lengths():
    """The strides are read from the tensor (guarded), so each length is a specialization, all held in the file."""
    longer = torch.randn(1, 16, 3)
    traced = tracejit.trace(overlapping_chunks, torch.randn(2, 8, 3), specialize_for=[(longer,)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jit = torch.jit.trace(overlapping_chunks, torch.randn(2, 8, 3))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    for x in (torch.randn(2, 8, 3), torch.randn(5, 8, 3), torch.randn(3, 16, 3)):
        want = overlapping_chunks(x)
        assert torch.equal(traced(x), want)
        assert torch.equal(loaded(x), want)
        if x.shape[1] == 8:
            assert torch.equal(jit(x), want)   # torch.jit.trace froze the chunk count: other lengths fail there
    with pytest.raises(tracejit.GuardError, match="stride"):
        loaded(torch.randn(2, 12, 3))   # a length no specialization holds: the guard on the strides names its line


def _edit_size(index, value):
    def edit(doc):
        sizes = _strided(doc)["args"][1]["tuple"]
        sizes[index] = value
    return edit


def _edit_offset(value):
    def edit(doc):
        _strided(doc)["args"][3] = value
    return edit


def _edit_strides(strides):
    def edit(doc):
        n = _strided(doc)
        n["kwargs"] = [[k, strides if k == "stride" else v] for k, v in n["kwargs"]]
    return edit


@pytest.mark.parametrize("name, raw, error, fragment", [
    ("past_the_end", lambda: rewrite(_save(tail_view, torch.randn(4, 6)), edit_doc=_edit_size(0, 10)),
     tracejit.LoadError, "outside the tensor's own"),   # constant sizes: refused at load
    ("offset_before_a_slice", lambda: rewrite(_save(tail_view, torch.randn(4, 6)), edit_doc=_edit_offset(0)),
     tracejit.GuardError, "outside the tensor's own"),   # x[1:] starts at 6: 0..5 are the row before it
    ("offset_past_a_slice", lambda: rewrite(_save(tail_view, torch.randn(4, 6)), edit_doc=_edit_offset(20)),
     tracejit.GuardError, "outside the tensor's own"),
    ("chunks_past_the_end", lambda: rewrite(_save(overlapping_chunks, torch.randn(2, 8, 3)),
                                            edit_doc=_edit_strides([24, 12, 3, 1])),
     tracejit.GuardError, "outside the tensor's own"),   # traced sizes: refused at the call
    ("negative_stride", lambda: rewrite(_save(overlapping_chunks, torch.randn(2, 8, 3)),
                                        edit_doc=_edit_strides([24, -6, 3, 1])),
     tracejit.LoadError, "none may be negative"),
])
def test_views_outside_the_input_are_refused(name, raw, error, fragment):
    data = raw()
    if error is tracejit.LoadError:
        with pytest.raises(tracejit.LoadError, match=fragment):
            tracejit.load(io.BytesIO(data))
        return
    loaded = tracejit.load(io.BytesIO(data))
    with pytest.raises(error, match=fragment):
        loaded(torch.randn(4, 6) if name.startswith("offset") else torch.randn(2, 8, 3))


def test_a_view_of_a_slice_answers_eager():
    loaded = tracejit.load(io.BytesIO(_save(tail_view, torch.randn(4, 6))))
    for x in (torch.randn(4, 6), torch.randn(4, 6)):
        assert torch.equal(loaded(x), tail_view(x))


def transposed_chunks(x):
    """Longformer at batch 1: ``reshape`` of a transposed tensor is a view whose elements are dense but not in
    order; the chunks are taken from it."""
    y = x.transpose(0, 1)   # [8, 3] -> [3, 8]: strides (1, 3)
    return y.as_strided((3, 3, 4), (1, 6, 3)) * 1   # rows of y, windows of 4 columns, stepping 2


def every_other_column(x):
    return x[:, ::2].as_strided((2, 2), (4, 1)) + 0   # reads x[0, 1] and x[1, 1], outside the slice


def test_a_dense_transposed_input_is_served_and_a_slice_with_gaps_refused():
    loaded = tracejit.load(io.BytesIO(_save(transposed_chunks, torch.randn(8, 3))))
    x = torch.randn(8, 3)
    assert torch.equal(loaded(x), transposed_chunks(x))
    gaps = tracejit.load(io.BytesIO(_save(every_other_column, torch.randn(4, 8))))   # traced shapes: no layout
    with pytest.raises(tracejit.GuardError, match="not dense in memory"):
        gaps(torch.randn(4, 8))
