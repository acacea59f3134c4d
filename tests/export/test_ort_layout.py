"""What the exported model gives onnxruntime's optimizer (issue #25: our ONNX as fast as torch.onnx's).

- A conv without a bias is a two-input ``Conv`` (export/convolution.py), not torch_lib's zero bias computed from
  the weight's shape, which kept the conv out of onnxruntime's blocked (NCHWc) layout (DenseNet).
- Python-number arguments torch_lib casts in the graph (ReLU6's ``CastLike(0)`` / ``CastLike(6)``) are folded
  at export (export/tidy.fold_constants), so a Clip's bounds are initializers and onnxruntime fuses it into
  the conv (MobileNet-V2).
- The onnxruntime backend runs the traced shapes in a session whose input axes are pinned to them
  (backends/onnxruntime.py), where onnxruntime fuses each residual add into its conv (ResNeXt's grouped
  convs break its tracking of symbolic sizes); any other shape runs in a session with dynamic axes.
Each case also gives eager's and torch.jit.trace's answers on new shapes.
"""
from __future__ import annotations

import threading
import warnings

import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracejit
from backend_check import assert_backends_match
from tracejit.backends.onnxruntime import OrtProgram

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _trace(m, *example):
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        return tracejit.trace(m, example)


def _ops(proto) -> list[str]:
    return [n.op_type for n in proto.graph.node]


def _optimized_ops(program_kwargs, traced, tmp_path) -> list[str]:
    path = tmp_path / "optimized.onnx"
    OrtProgram(traced, optimized_model_path=path, threads=1, **program_kwargs)
    return [n.op_type for n in onnx.load(str(path)).graph.node]


def _skip_without_nchwc(ops):
    if "ReorderOutput" not in ops:
        pytest.skip("this onnxruntime build does not use the NCHWc layout (no AVX2/AVX-512)")


@pytest.mark.parametrize("rank, stride, padding, dilation, groups", [
    (1, 2, 0, 1, 1), (2, (2, 1), (1, 2), (1, 2), 3), (3, 1, 1, 1, 3)])
def test_conv_without_bias_is_a_two_input_conv_with_eager_answers(rank, stride, padding, dilation, groups):
    gen = torch.Generator().manual_seed(rank * 10 + groups)
    weight = torch.randn(6, 6 // groups, *[3] * rank, generator=gen)
    conv = (F.conv1d, F.conv2d, F.conv3d)[rank - 1]

    def fn(x):
        return conv(x, weight, None, stride, padding, dilation, groups)

    size = [9, 7, 5][:rank]
    example = (torch.randn(2, 6, *size, generator=gen),)
    proto = tracejit.export_onnx(_trace(fn, *example))
    assert _ops(proto) == ["Conv"], _ops(proto)
    assert len(proto.graph.node[0].input) == 2   # no bias input: eager's math, no "+ 0.0"
    new = [(torch.randn(3, 6, *[s + 4 for s in size], generator=gen),)]
    assert_backends_match(fn, example, new, f"conv{rank}d without bias")


def test_conv_with_a_bias_keeps_it():
    conv = nn.Conv2d(3, 4, 3).eval()
    proto = tracejit.export_onnx(_trace(conv, torch.randn(1, 3, 8, 8)))
    (node,) = [n for n in proto.graph.node if n.op_type == "Conv"]
    assert len(node.input) == 3


class DenseLayer(nn.Module):
    """DenseNet's layer: batch norm, ReLU, a bias-free conv, its output concatenated to its input."""

    def __init__(self, channels: int, growth: int = 16):
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)
        self.conv = nn.Conv2d(channels, growth, 3, padding=1, bias=False)

    def forward(self, x):
        return torch.cat([x, self.conv(torch.relu(self.norm(x)))], 1)


def _dense_net():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, bias=False), DenseLayer(32), DenseLayer(48),
                        nn.BatchNorm2d(64), nn.ReLU()).eval()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
    return net


def test_dense_layers_stay_in_the_blocked_layout(tmp_path):
    net = _dense_net()
    traced = _trace(net, torch.randn(1, 3, 16, 16))
    assert not {"Shape", "Expand", "CastLike"} & set(_ops(tracejit.export_onnx(traced)))
    ops = _optimized_ops({}, traced, tmp_path)
    _skip_without_nchwc(ops)
    # each batch norm became a blocked depthwise conv: nothing leaves the blocked layout before the output
    assert "BatchNormalization" not in ops and "ReorderInput" not in ops[1:] and ops.count("ReorderOutput") == 1, ops
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    for shape in [(1, 3, 16, 16), (3, 3, 20, 12)]:
        x = torch.randn(shape)
        torch.testing.assert_close(program(x), net(x).detach(), rtol=1e-4, atol=1e-5)


class InvertedResidual(nn.Module):
    """MobileNet-V2's block: expand, depthwise, project, each conv + batch norm (+ ReLU6)."""

    def __init__(self, c: int = 16, e: int = 64):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), nn.ReLU6(inplace=True),
                                  nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e),
                                  nn.ReLU6(inplace=True), nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.body(x)


def test_relu6_bounds_are_folded_into_initializers_and_fused(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU6(), InvertedResidual()).eval()
    traced = _trace(net, torch.randn(1, 3, 16, 16))
    proto = tracejit.export_onnx(traced)
    assert "CastLike" not in _ops(proto), _ops(proto)
    initializers = {i.name for i in proto.graph.initializer}
    clips = [n for n in proto.graph.node if n.op_type == "Clip"]
    assert len(clips) == 3 and all(set(n.input[1:]) <= initializers for n in clips)
    ops = _optimized_ops({}, traced, tmp_path)
    _skip_without_nchwc(ops)
    assert "Clip" not in ops, ops   # each ReLU6 is its conv's fused activation
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    x = torch.randn(2, 3, 12, 20) * 4   # values past both bounds
    torch.testing.assert_close(program(x), net(x).detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fn, what", [(lambda x: F.elu(x) * 2, "elu"), (lambda x: F.softplus(x, 2.0, 5.0), "softplus"),
                                      (lambda x: F.hardtanh(x, -0.5, 0.25), "hardtanh")])
def test_folded_scalar_casts_keep_eager_answers(fn, what):
    example = (torch.randn(2, 5) * 3,)
    proto = tracejit.export_onnx(_trace(fn, *example))
    assert "CastLike" not in _ops(proto), _ops(proto)
    assert_backends_match(fn, example, [(torch.randn(4, 7) * 3,)], what)


class Bottleneck(nn.Module):
    """ResNeXt's block: 1x1, grouped 3x3 (left in plain layout by onnxruntime), 1x1, residual add, ReLU."""

    def __init__(self, c: int = 32):
        super().__init__()
        self.a, self.g, self.b = nn.Conv2d(c, c, 1), nn.Conv2d(c, c, 3, padding=1, groups=8), nn.Conv2d(c, c, 1)

    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.g(torch.relu(self.a(x))))) + x)


def _resnext():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), Bottleneck(), Bottleneck()).eval()


def test_traced_shapes_run_pinned_and_the_residual_add_is_fused(tmp_path):
    net = _resnext()
    traced = _trace(net, torch.randn(1, 3, 16, 16))
    ops = _optimized_ops({}, traced, tmp_path)
    _skip_without_nchwc(ops)
    assert "Add" not in ops and "Relu" not in ops, ops   # each add + relu is fused into the conv before it
    program = OrtProgram(traced, threads=1)
    assert program.pinned_sizes == {"input_dim0": 1, "input_dim1": 3, "input_dim2": 16, "input_dim3": 16}
    assert program.session.get_inputs()[0].shape == [1, 3, 16, 16]


def test_other_shapes_run_in_a_dynamic_session_opened_once():
    net = _resnext()
    program = tracejit.optimize_for_inference(_trace(net, torch.randn(1, 3, 16, 16)), backend="onnxruntime")
    x = torch.randn(1, 3, 16, 16)
    torch.testing.assert_close(program(x), net(x).detach(), rtol=1e-4, atol=1e-5)
    assert program._dynamic_session is None   # the traced shape needs no second session
    results, errors = {}, []

    def call(k):
        try:
            y = torch.randn(2, 3, 11, 7, generator=torch.Generator().manual_seed(k))
            results[k] = (program(y), net(y).detach())
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4
    for got, want in results.values():
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    dynamic = program._dynamic_session
    assert dynamic is not None and dynamic is not program.session
    assert dynamic.get_inputs()[0].shape == ["input_dim0", "input_dim1", "input_dim2", "input_dim3"]
    program(torch.randn(5, 3, 9, 9))
    assert program._dynamic_session is dynamic   # opened once
    torch.testing.assert_close(program(x), net(x).detach(), rtol=1e-4, atol=1e-5)   # the pinned one again


def test_a_flat_multi_input_program_chooses_per_call():
    def fn(a, b):
        return torch.relu(a @ b.t()) + 1

    example = (torch.randn(3, 4), torch.randn(5, 4))
    program = tracejit.optimize_for_inference(_trace(fn, *example), backend="onnxruntime")
    assert program.pinned_sizes == {"a_dim0": 3, "a_dim1": 4, "b_dim0": 5, "b_dim1": 4}
    for a, b in [example, (torch.randn(3, 4), torch.randn(2, 4)), (torch.randn(7, 6), torch.randn(1, 6)), example]:
        torch.testing.assert_close(program(a, b), fn(a, b), rtol=1e-5, atol=1e-6)
    assert program._dynamic_session is not None


class Heads(nn.Module):
    """Attention on an input holding q, k and v: the pieces of a split of an input axis (a sequence in the
    exported model, whose items onnxruntime infers no shape for) reshaped by sizes read from them, so each
    target shape is a Shape / Gather / Concat subgraph onnxruntime cannot fold alone."""

    def __init__(self, dim: int = 16, heads: int = 4):
        super().__init__()
        self.dim, self.heads, self.out = dim, heads, nn.Linear(dim, dim)

    def forward(self, x):
        q, k, v = x.split(self.dim, dim=2)
        q, k, v = (t.view(t.size(0), t.size(1), self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = ((q @ k.transpose(-1, -2)).softmax(-1) @ v).transpose(1, 2)
        return self.out(y.reshape(y.size(0), y.size(1), -1))


def test_traced_shapes_run_a_model_with_the_size_math_folded(tmp_path):
    torch.manual_seed(0)
    net = Heads().eval()
    traced = _trace(net, torch.randn(2, 5, 48))
    assert {"Shape", "Split"} <= set(_ops(tracejit.export_onnx(traced)))   # the file keeps every axis dynamic (the
    # split by one head size: a Split whose sizes are computed from the axis, export/sequences.py)
    ops = _optimized_ops({}, traced, tmp_path)
    assert not {"Shape", "Gather", "Concat", "SequenceAt", "Squeeze"} & set(ops), ops
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    for shape in [(2, 5, 48), (3, 7, 48), (1, 1, 48), (2, 5, 48)]:
        x = torch.randn(shape)
        torch.testing.assert_close(program(x), net(x).detach(), rtol=1e-4, atol=1e-5)


def test_a_model_that_cannot_be_folded_runs_with_the_axes_fixed_by_the_session(monkeypatch):
    import tracejit.backends.onnxruntime as backend

    def refuse(proto, sizes):
        raise ValueError("no shape inference for this op")
    monkeypatch.setattr(backend, "with_input_sizes", refuse)
    net = Heads().eval()
    program = OrtProgram(_trace(net, torch.randn(2, 5, 48)), threads=1)
    assert program.session.get_inputs()[0].shape == [2, 5, 48]
    for shape in [(2, 5, 48), (3, 7, 48)]:
        x = torch.randn(shape)
        torch.testing.assert_close(program(x), net(x).detach(), rtol=1e-4, atol=1e-5)


class RMSNormGelu(nn.Module):
    """LLaMA / T5's RMSNorm (``x * rsqrt(mean(x^2) + eps) * weight``) and an exact-erf GELU MLP (Whisper's)."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.embed, self.up, self.down = nn.Linear(dim, dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = self.embed(x)   # the normalized axis has a known size (a mean over an input axis, maybe empty, is not one)
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return self.down(F.gelu(self.up(h)))


def test_rms_norm_and_gelu_are_in_the_forms_onnxruntime_fuses(tmp_path):
    torch.manual_seed(0)
    net = RMSNormGelu().eval()
    traced = _trace(net, torch.randn(2, 5, 16))
    assert "Reciprocal" not in _ops(tracejit.export_onnx(traced))
    ops = _optimized_ops({}, traced, tmp_path)
    assert "SimplifiedLayerNormalization" in ops and "Gelu" in ops, ops
    assert not {"Sqrt", "Erf", "ReduceMean"} & set(ops), ops
    assert_backends_match(net, (torch.randn(2, 5, 16),), [(torch.randn(3, 7, 16) * 3,), (torch.randn(1, 1, 16),)],
                          "rms norm + gelu")


def test_tanh_gelu_is_in_the_form_onnxruntime_fuses(tmp_path):
    """``F.gelu(x, approximate="tanh")`` (timm's MaxViT) runs as one FastGelu in onnxruntime, with eager's answers."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 64), nn.GELU(approximate="tanh"), nn.Linear(64, 16)).eval()
    traced = _trace(net, torch.randn(2, 5, 16))
    ops = _optimized_ops({}, traced, tmp_path)
    assert "FastGelu" in ops and "Tanh" not in ops and "Pow" not in ops, ops
    assert_backends_match(net, (torch.randn(2, 5, 16),), [(torch.randn(3, 7, 16) * 3,), (torch.randn(1, 1, 16),)],
                          "tanh gelu")


@pytest.mark.parametrize("fn, what", [(lambda x: torch.rsqrt(x.abs() + 0.5), "rsqrt"),
                                      (lambda x: F.gelu(x), "gelu"), (lambda x: F.gelu(x, approximate="tanh"), "tanh gelu")])
def test_rsqrt_and_gelu_give_eager_answers(fn, what):
    assert_backends_match(fn, (torch.randn(4, 6) * 3,), [(torch.randn(2, 9) * 5,)], what)
