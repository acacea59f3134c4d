"""passes/cuda_conv_kernels.py's chains, proved on any machine: the pass runs on a program traced on the meta device
(standing for CUDA: ``DEVICE_TYPE``), and the kernel's recorded-ops path gives eager's answers on the CPU. On a
GPU, tests/device/test_cuda_models.py and test_cuda_paths.py run the fused cuDNN calls themselves."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracejit
from tracejit.kernels import cudnn_conv
from tracejit.kernels.cudnn_conv import CudnnConvRelu
from tracejit.passes import cuda_conv_kernels
from tracejit.passes.cuda_conv_kernels import cudnn_conv_nodes, fuse_cudnn_convs
from tracejit.passes.lowered import Lowered

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class Block(nn.Module):
    """conv + relu, conv + add_ + relu (a ResNet block), r + conv then relu_, a conv with no relu, and a conv whose
    result is read twice (never fused)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.c, self.d, self.e = nn.Conv2d(4, 4, 1), nn.Conv2d(4, 4, 1, bias=False), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = F.relu(self.a(x))
        z = self.b(y)
        z.add_(x)
        z = F.relu(z)
        w = torch.relu_(z + self.c(z))
        v = self.d(w)
        u = self.e(v)
        return F.relu(u) + u


def _graph(device):
    torch.manual_seed(0)
    net = Block().eval().to(device)
    traced = tracejit.trace(net, (torch.randn(2, 4, 8, 8, device=device),), check_trace=False)
    return tracejit.optimize_for_inference(traced).forward.run_graph


def test_the_chains_a_cuda_program_fuses(monkeypatch):
    monkeypatch.setattr(cuda_conv_kernels, "DEVICE_TYPE", "meta")
    monkeypatch.setattr(cuda_conv_kernels, "fusion_keeps_nan", lambda device: True)
    lowered = fuse_cudnn_convs(Lowered(_graph("meta")))
    fused = sorted(n.attrs["ops"] for n in cudnn_conv_nodes(lowered.graph))
    assert fused == ["cudnn:conv2d+add+relu", "cudnn:conv2d+add+relu", "cudnn:conv2d+relu"]
    assert [n.op for n in lowered.graph.nodes].count("aten::conv2d.default") == 2   # d (no relu), e (read twice)
    kernels = [lowered.kernels[n.attrs["index"]] for n in cudnn_conv_nodes(lowered.graph)]
    assert {(k.residual, k.inplace_add) for k in kernels} == {(False, True), (True, True), (True, False)}


def test_nothing_is_fused_where_the_fused_relu_drops_nan_or_off_cuda(monkeypatch):
    monkeypatch.setattr(cuda_conv_kernels, "DEVICE_TYPE", "meta")
    monkeypatch.setattr(cuda_conv_kernels, "fusion_keeps_nan", lambda device: False)
    assert cudnn_conv_nodes(fuse_cudnn_convs(Lowered(_graph("meta"))).graph) == []
    monkeypatch.setattr(cuda_conv_kernels, "fusion_keeps_nan", lambda device: True)
    assert cudnn_conv_nodes(fuse_cudnn_convs(Lowered(_graph("cpu"))).graph) == []   # a CPU program
    assert cudnn_conv.fusion_keeps_nan("cpu") is False and cudnn_conv.fusion_keeps_nan("meta") is False


@pytest.mark.parametrize("residual,inplace_add", [(False, True), (True, True), (True, False)])
def test_a_call_that_does_not_fit_runs_the_recorded_ops(residual, inplace_add):
    torch.manual_seed(0)
    w, b = torch.randn(6, 3, 3, 3), torch.randn(6)
    kernel = CudnnConvRelu(w, b, 2, 1, 1, 1, residual=residual, inplace_add=inplace_add)
    x = torch.randn(2, 3, 9, 9)   # a CPU tensor: the recorded ops
    r = torch.randn(2, 6, 5, 5) if residual else None
    want = torch.relu(torch.conv2d(x, w, b, 2, 1) + (r if residual else 0))
    got = kernel(x, r) if residual else kernel(x)
    torch.testing.assert_close(got, want)
    assert kernel._output_shape(x) == tuple(want.shape)
    moved = kernel.moved(lambda t: t.double())
    assert moved.weight.dtype == torch.float64 and moved.residual == residual
