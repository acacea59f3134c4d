"""passes/cuda_linear_kernels.py and kernels/cuda_linear.py, proved on any machine: the rewrite runs on a program
traced on the meta device (standing for CUDA), and the kernel's two paths give F.linear's answers on the CPU. On a
GPU, tests/device/test_cuda_paths.py runs the kernel itself."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracejit
from tracejit.kernels import cuda_linear
from tracejit.kernels.cuda_linear import CudaLinear
from tracejit.passes import cuda_linear_kernels, linear_weight_layout
from tracejit.passes.cuda_linear_kernels import cuda_linear_nodes, fuse_cuda_linears
from tracejit.passes.lowered import Lowered

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class Net(nn.Module):
    """Three linears with frozen weights, one without bias, and one whose weight the input makes (kept torch's)."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Linear(16, 8, bias=False), nn.Linear(8, 8)

    def forward(self, x):
        y = self.b(F.gelu(self.a(x)))
        z = self.c(y)
        return F.linear(z, torch.ones(8, 8, device=z.device) * z.mean())


def _graph(device):
    torch.manual_seed(0)
    net = Net().eval().to(device)
    traced = tracejit.trace(net, (torch.randn(2, 3, 8, device=device),), check_trace=False)
    return tracejit.optimize_for_inference(traced).forward.run_graph


def test_linears_with_transposed_weights_become_kernels(monkeypatch):
    monkeypatch.setattr(cuda_linear_kernels, "DEVICE_TYPE", "meta")
    monkeypatch.setattr(linear_weight_layout, "MEASURED_DEVICES", ("cpu", "cuda", "meta"))
    lowered = fuse_cuda_linears(Lowered(_graph("meta")))
    ops = sorted(n.attrs["ops"] for n in cuda_linear_nodes(lowered.graph))
    assert ops == ["cuda:linear (16, 8) as matmul + bias", "cuda:linear (8, 16) as matmul",
                   "cuda:linear (8, 8) as matmul + bias"]
    assert [n.op for n in lowered.graph.nodes].count("aten::linear.default") == 1   # the input's weight


def test_nothing_changes_off_cuda():
    graph = _graph("cpu")
    assert cuda_linear_nodes(fuse_cuda_linears(Lowered(graph)).graph) == []
    assert cuda_linear_nodes(graph) == []


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(8,), (5, 8), (2, 3, 8), (0, 8)])
def test_both_paths_give_linears_answer(monkeypatch, shape, bias):
    torch.manual_seed(0)
    weight = torch.randn(6, 8).t().contiguous().t()
    b = torch.randn(6) if bias else None
    kernel = CudaLinear(weight, b)
    x = torch.randn(shape)
    want = F.linear(x, weight, b)
    torch.testing.assert_close(kernel(x), want)   # a CPU tensor does not fit: the recorded op
    monkeypatch.setattr(CudaLinear, "_fits", lambda self, t: True)
    got = kernel(x)   # the matmul + bias path
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)


def test_many_rows_and_autograd_keep_torchs_linear(monkeypatch):
    weight = torch.randn(4, 8).t().contiguous().t()
    kernel = CudaLinear(weight, torch.randn(4))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))   # stand in for a CUDA tensor
    assert kernel._fits(torch.randn(cuda_linear.MAX_ROWS, 8))
    assert not kernel._fits(torch.randn(cuda_linear.MAX_ROWS + 1, 8))
    assert not kernel._fits(torch.randn(3, 8, requires_grad=True))
    assert not kernel._fits(torch.randn(3, 8, dtype=torch.float64))
    assert not CudaLinear(weight.contiguous(), None)._fits(torch.randn(3, 8))   # not stored transposed
