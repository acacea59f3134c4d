"""``as_strided`` of a tensor whose strides the code read (transformers' Longformer chunks its attention so:
``x.as_strided(size, stride)`` with ``stride`` computed from ``x.stride()`` of a non-contiguous view) exports as a
gather from the tensor's storage order (export/strided.py), and the ``x.stride()`` guard is checked like a size guard:
by the model (from ``Shape(x)``) and, in the onnxruntime backend, on meta tensors before each run. Before, the
onnxruntime backend refused such a model (ExportError: "the trace relied on tensor values ('stride' gave ...)"), and
torch_lib's ``as_strided`` read a non-contiguous tensor as if it were contiguous."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit
from tracejit.export.errors import ExportError

ort = pytest.importorskip("onnxruntime")


class Chunks(nn.Module):
    """Longformer's ``_chunk``: overlapping windows of 2w rows, w apart, of a head-split projection."""

    def __init__(self, d=8, heads=2, w=2):
        super().__init__()
        torch.manual_seed(0)
        self.lin, self.heads, self.w = nn.Linear(d, d), heads, w

    def forward(self, h):   # (seq, batch, d), as Longformer's layers hold it
        seq, b, d = h.shape
        q = self.lin(h).view(seq, b, self.heads, d // self.heads).transpose(0, 1)
        q = q.transpose(1, 2).reshape(b * self.heads, seq, d // self.heads)   # a view: not contiguous
        q = q.view(q.size(0), seq // (2 * self.w), 2 * self.w, q.size(2))
        size = list(q.size())
        size[1] = size[1] * 2 - 1
        stride = list(q.stride())
        stride[1] = stride[1] // 2
        return q.as_strided(size=size, stride=stride) * 2 + 1


def _h(seq, batch, seed=0):
    return torch.randn(seq, batch, 8, generator=torch.Generator().manual_seed(seed + seq * 10 + batch))


def _ort(proto, x):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


def test_onnxruntime_backend_serves_new_lengths_with_eagers_answer():
    model = Chunks().eval()
    traced = tracejit.trace(model, _h(8, 1))
    fast = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    with torch.no_grad():
        for seq in (8, 12, 20):   # multiples of the window: the strides read are the traced ones
            x = _h(seq, 1, seed=1)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-5, atol=1e-5)
        assert fast.handed_over == 0   # onnxruntime answered
        x = _h(12, 2)   # another batch: other strides; the traced program answers (eager's answer)
        torch.testing.assert_close(fast(x), model(x), rtol=1e-5, atol=1e-5)
        assert fast.handed_over == 1


def test_exported_file_checks_the_layout_it_assumed():
    model = Chunks().eval()
    proto = tracejit.export_onnx(tracejit.trace(model, _h(8, 1)))
    with torch.no_grad():
        for seq in (8, 16, 28):
            x = _h(seq, 1, seed=2)
            torch.testing.assert_close(_ort(proto, x), model(x), rtol=1e-5, atol=1e-5)
        with pytest.raises(Exception, match="tracejit_guard_.*stride"):   # batch 2: the strides read differ
            _ort(proto, _h(8, 2))


def as_strided_of_a_transpose(x):
    return x.t().as_strided((2, 2), (1, 2)) + 0


def test_as_strided_without_a_stride_read_is_refused_not_read_as_contiguous():
    x = torch.arange(12.0).view(3, 4)
    traced = tracejit.trace(as_strided_of_a_transpose, x)
    try:
        proto = tracejit.export_onnx(traced)
    except ExportError as e:
        assert "as_strided" in str(e) and "stride" in str(e)
        return
    y = torch.arange(12.0).view(3, 4) * 3
    torch.testing.assert_close(_ort(proto, y), as_strided_of_a_transpose(y))
