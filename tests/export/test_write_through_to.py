"""An in-place write into ``x.to(dtype)`` where the dtype is already ``x``'s (``to`` returns ``x`` itself: transformers'
Informer, ``context = v.cumsum(-2, dtype=torch.float32).to(v.dtype); context[rows, top, :] = out``) was refused:
"the written tensor is a view (aten::to.dtype) that has no inverse in ONNX", so Informer had no ONNX backend
(breadth27). Such a ``to`` is now its tensor (export/view_writes.py); one that asks for a copy stays refused."""
from __future__ import annotations

import pytest
import torch

import tracejit
from tracejit.export.errors import ExportError

ort = pytest.importorskip("onnxruntime")


def scatter_into_cast(v, top, out):
    context = v.cumsum(dim=-2, dtype=torch.float32).to(v.dtype)
    rows = torch.arange(context.size(0)).unsqueeze(-1)
    context[rows, top, :] = out
    return context * 2


def _inputs(b, n, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, n, 4, generator=g), torch.stack([torch.randperm(n, generator=g)[:2] for _ in range(b)]),
            torch.randn(b, 2, 4, generator=g))


def test_write_into_a_same_dtype_to_exports_with_eagers_answers():
    proto = tracejit.export_onnx(tracejit.trace(scatter_into_cast, _inputs(2, 5, 0)))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for b, n in ((2, 5), (3, 9)):
        args = _inputs(b, n, b + n)
        got = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})[0]
        torch.testing.assert_close(torch.from_numpy(got), scatter_into_cast(*args))


def write_into_a_copy(v):
    base = v * 1
    c = base.to(torch.float32, copy=True)
    c[0] = 0
    return base + c


def test_write_into_a_copying_to_is_refused_or_exact():
    traced = tracejit.trace(write_into_a_copy, torch.randn(3, 4))
    try:
        proto = tracejit.export_onnx(traced)
    except ExportError as e:
        assert "to()" in str(e) or "copy" in str(e)
        return
    x = torch.randn(5, 4)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    torch.testing.assert_close(torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]),
                               write_into_a_copy(x))
