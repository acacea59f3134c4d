"""In-place writes through views export (issue #25: EfficientNet-B0's dropout_ after flatten, Swin-T's
fill_ on a slice, GhostNet's add_ on a slice), as do swapaxes, reshape_as (MaxViT-T, LeViT) and
NFNet's batch-statistics batch_norm; what ONNX cannot show is refused with the line.

Each case: the write changes eager's answer (it is compared with the same code without the write), the
new inputs move it, and onnxruntime / OpenVINO give eager's and torch.jit's answer on new shapes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tracejit
from tracejit.export.errors import ExportError

from backend_check import assert_backends_match


def add_on_slice(x, write=True):          # GhostNet: out[:, c:].add_(...)
    y = x * 2
    if write:
        y[:, 1:].add_(x[:, :-1])
    return y + 1


def fill_on_slice(x, write=True):         # Swin-T's attention mask: img_mask[:, h, w, :].fill_(cnt)
    y = x.clone()
    if write:
        y[:, :1].fill_(0.5)
        y[:, 2:3].fill_(-1.0)
    return y * y.sum(1, keepdim=True)


def dropout_after_flatten(x, write=True):  # EfficientNet-B0: flatten, then dropout(inplace=True) in eval
    y = torch.flatten(x.relu(), 1)
    if write:
        F.dropout(y, 0.2, False, inplace=True)
        y.mul_(3)
    return y


def write_through_select_and_transpose(x, write=True):
    y = x + 0
    if write:
        y.transpose(0, 1)[1].mul_(-4)
        y.permute(1, 0)[0].sub_(2)
    return y.exp()


def write_through_reshape_views(x, write=True):
    y = x.sin()
    if write:
        y.view(-1)[::2].zero_()
        y.unsqueeze(0).squeeze(0)[..., -1:].add_(10)
    return y, y.sum()


def view_read_after_write(x, write=True):  # the view, its base and a later view all see the write
    y = x.abs()
    v = y[:, 1:]
    if write:
        v.clamp_(max=0.5)
    return v * 2, y.t().contiguous(), y[0]


def swapaxes_reshape_as(x, write=True):
    z = x.swapaxes(1, 2) if write else x
    return z.reshape_as(torch.empty(z.shape[0], z.shape[1] * z.shape[2])) * 2


CASES = [
    (add_on_slice, (torch.randn(2, 3),), [(torch.randn(4, 5),)]),
    (fill_on_slice, (torch.randn(2, 4),), [(torch.randn(3, 6),)]),
    (dropout_after_flatten, (torch.randn(2, 3, 4),), [(torch.randn(5, 2, 3),)]),
    (write_through_select_and_transpose, (torch.randn(3, 2),), [(torch.randn(4, 5),)]),
    (write_through_reshape_views, (torch.randn(2, 4),), [(torch.randn(3, 6),)]),
    (view_read_after_write, (torch.randn(2, 3),), [(torch.randn(4, 5),)]),
    (swapaxes_reshape_as, (torch.randn(2, 3, 4),), [(torch.randn(3, 5, 2),)]),
]


def _flat(out):
    return torch.cat([t.reshape(-1) for t in (out if isinstance(out, tuple) else (out,))])


@pytest.mark.parametrize("fn,example,new", CASES, ids=[c[0].__name__ for c in CASES])
def test_write_through_views_exports_as_eager(fn, example, new):
    x = new[0][0]
    assert not torch.equal(_flat(fn(x)), _flat(fn(x, write=False))), "the write must change the answer"
    assert not torch.equal(_flat(fn(x)), _flat(fn(x + 1))), "the inputs must move the answer"
    assert_backends_match(fn, example, new, fn.__name__)


class WeightStandardizedConv(torch.nn.Module):
    """NFNet's ScaledStdConv2d: the weight normalized by F.batch_norm(training=True) without running stats."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 3, 3, 3))
        self.gain = torch.nn.Parameter(torch.rand(4) + 0.5)

    def forward(self, x):
        w = F.batch_norm(self.weight.reshape(1, 4, -1), None, None, weight=self.gain, training=True,
                         momentum=0.0, eps=1e-5).reshape_as(self.weight)
        return F.conv2d(x, w, padding=1)


def test_batch_statistics_batch_norm_exports_in_eval_mode():
    module = WeightStandardizedConv().eval()
    x = torch.randn(2, 3, 9, 9)
    plain = F.conv2d(x, module.weight, padding=1)
    assert not torch.allclose(module(x), plain), "the standardisation must change the answer"
    assert_backends_match(module, (torch.randn(1, 3, 8, 8),), [(x,)], "weight standardisation", atol=1e-4)


def test_batch_norm_updating_running_stats_is_refused_with_the_right_advice():
    mean, var = torch.zeros(3), torch.ones(3)
    traced = tracejit.trace(lambda x: F.batch_norm(x, mean, var, training=True), torch.randn(4, 3))
    with pytest.raises(ExportError, match="updates its running statistics"):
        tracejit.export_onnx(traced)


def _write_input(x):
    x[:, :1].mul_(2)
    return x + 1


class _BufferWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x):
        self.seen[:1].add_(x.sum())
        return x * self.seen


_write_parameter_view = _BufferWrite()


def _stale_alias(x):
    y = x * 1
    early = y[0]          # made before the write, read after it: ONNX would give the old values
    y.add_(1)
    return early * 2


def _expand_write(x):
    y = torch.zeros(1, 3).expand(2, 3).clone()
    y.unfold(1, 2, 1).add_(1)
    return y + x


@pytest.mark.parametrize("fn,why", [
    (_write_input, "an input of the traced program"),
    (_write_parameter_view, "parameter, buffer or constant"),
    (_stale_alias, "another view of the written tensor"),
    (_expand_write, "no inverse in ONNX"),
])
def test_writes_onnx_cannot_show_are_refused_with_the_line(fn, why):
    traced = tracejit.trace(fn, torch.randn(2, 3))
    with pytest.raises(ExportError, match=why) as info:
        tracejit.export_onnx(traced)
    assert "test_inplace_on_views.py" in str(info.value)
