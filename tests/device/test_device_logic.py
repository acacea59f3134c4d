"""Device logic that a CPU-only machine can prove, with the ``meta`` device standing for a GPU.

A meta tensor has a device, a dtype and a shape but no values: a program whose computation
touches the CPU (a numpy / numexpr / oneDNN kernel, a constant captured on the CPU) either fails
or answers on the wrong device, so meta programs show which device logic a non-CPU program gets.
"""
from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracejit

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def kernel_nodes(optimized) -> list:
    """The CPU-only kernel nodes (numpy, numexpr, oneDNN: op ``tracejit::kernel``) an optimized program runs."""
    graph = optimized.forward.run_graph if isinstance(optimized, nn.Module) else optimized._fn.run_graph
    return [n for n in graph.nodes if n.op == "tracejit::kernel"]


class Net(nn.Module):
    """Each CPU-only kernel's pattern: conv + batch norm + relu (oneDNN conv), an elementwise chain
    (numpy / numexpr region), large linears with an activation (oneDNN linear)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.up = nn.Linear(16 * 8 * 8, 512)
        self.down = nn.Linear(512, 128)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = torch.tanh(y * 0.5 + 1.0) * torch.sigmoid(y) - y.abs() / 3
        y = F.gelu(self.up(y.flatten(1)))
        return self.down(y)


def _net(device) -> nn.Module:
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():   # batch-norm statistics that are not the identity
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
    return net.to(device)


def test_cpu_only_kernels_are_chosen_on_cpu_and_never_for_another_device():
    with torch.no_grad():
        on_cpu = tracejit.optimize_for_inference(tracejit.trace(_net("cpu"), (torch.randn(2, 3, 8, 8),)))
        on_meta = tracejit.optimize_for_inference(
            tracejit.trace(_net("meta"), (torch.randn(2, 3, 8, 8, device="meta"),), check_trace=False))
    # the elementwise chain (a numpy region) and the large linear + gelu (oneDNN); the conv stays torch's
    # (abs reads a feature map: not layout-free), and so does the lone small linear (kernels/elementwise_costs:
    # a kernel's entry costs more than it saves on one linear)
    assert len(kernel_nodes(on_cpu)) >= 2
    assert kernel_nodes(on_meta) == []
    out = on_meta(torch.randn(5, 3, 8, 8, device="meta"))   # another batch size
    assert out.device.type == "meta" and out.shape == (5, 128)


def test_a_cpu_optimized_program_moved_to_another_device_runs_torchs_ops_there():
    with torch.no_grad():
        optimized = tracejit.optimize_for_inference(tracejit.trace(_net("cpu"), (torch.randn(2, 3, 8, 8),)))
        optimized.to("meta")
        out = optimized(torch.randn(3, 3, 8, 8, device="meta"))
    assert out.device.type == "meta" and out.shape == (3, 128)


def _relative(x):
    """Tensors made from the input's device, dtype and sizes (device-relative capture, docs/CAPTURE.md)."""
    n = x.shape[-1]
    scale = torch.arange(n, device=x.device, dtype=x.dtype) / n
    bias = torch.ones(1, device=x.device) * 0.5
    return (x * scale + bias).softmax(-1) - torch.zeros_like(x) + x.new_full((1,), 2.0)


def test_traced_on_cpu_runs_on_another_device():
    traced = tracejit.trace(_relative, (torch.randn(2, 5),))
    out = traced(torch.randn(3, 7, device="meta"))
    assert out.device.type == "meta" and out.shape == (3, 7)


def test_traced_on_another_device_runs_on_cpu_with_eagers_answers():
    traced = tracejit.trace(_relative, (torch.randn(2, 5, device="meta"),), check_trace=False)
    for shape in ((3, 7), (1, 2)):   # values exist only now: each must be computed on the cpu
        x = torch.randn(shape)
        assert not torch.allclose(_relative(x), _relative(torch.zeros(shape)))
        torch.testing.assert_close(traced(x), _relative(x))


def test_a_literal_device_stays_what_the_code_says():
    def to_meta(x):
        return (x + 1).to("meta") * 2

    traced = tracejit.trace(to_meta, (torch.randn(2, 3),), check_trace=False)
    out = traced(torch.randn(4, 3))
    assert out.device.type == "meta" and out.shape == (4, 3)


def test_loaded_with_map_location_runs_on_that_device():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    buf = io.BytesIO()
    tracejit.save(tracejit.trace(net, (torch.randn(3, 6),)), buf)
    buf.seek(0)
    on_meta = tracejit.load(buf, map_location="meta")
    assert {p.device.type for p in on_meta.parameters()} == {"meta"}
    out = on_meta(torch.randn(5, 6, device="meta"))
    assert out.device.type == "meta" and out.shape == (5, 2)
    buf.seek(0)
    on_cpu = tracejit.load(buf, map_location=torch.device("cpu"))
    x = torch.randn(5, 6)
    torch.testing.assert_close(on_cpu(x), net(x))


def test_an_optimized_program_loaded_onto_another_device_chooses_no_cpu_kernel():
    with torch.no_grad():
        optimized = tracejit.optimize_for_inference(tracejit.trace(_net("cpu"), (torch.randn(2, 3, 8, 8),)))
    buf = io.BytesIO()
    tracejit.save(optimized, buf)
    buf.seek(0)
    loaded = tracejit.load(buf, map_location="meta")
    with torch.no_grad():
        again = tracejit.optimize_for_inference(loaded)
        out = again(torch.randn(4, 3, 8, 8, device="meta"))
    assert kernel_nodes(again) == []
    assert out.device.type == "meta" and out.shape == (4, 128)


def _branches(x):
    if x.sum() > 0:   # a value read: guarded by a value check (a device sync on a GPU)
        return x + 1
    return x - 1


def test_shape_guards_need_no_values_and_value_guards_fail_as_eager_does():
    full = tracejit.trace(_branches, (torch.ones(3),))
    shapes_only = tracejit.trace(_branches, (torch.ones(3),), guards="shapes")
    meta = torch.ones(4, device="meta")
    with pytest.raises(RuntimeError) as eager_error:
        _branches(meta)
    with pytest.raises(RuntimeError) as traced_error:
        full(meta)   # the value guard reads the sum, as eager's branch does
    assert str(traced_error.value) == str(eager_error.value)
    out = shapes_only(meta)   # no value read: nothing that would wait for a device
    assert out.device.type == "meta" and out.shape == (4,)
    x = -torch.ones(2)
    torch.testing.assert_close(full(x), _branches(x))           # a value guard that fails retraces
    torch.testing.assert_close(shapes_only(x), torch.ones(2) * 0)   # shapes only: the traced branch, as documented


def test_linear_weights_keep_their_layout_off_the_cpu():
    from tracejit.passes.linear_weight_layout import transposed_weights

    def optimized(device):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).eval().to(device)
        with torch.no_grad():
            return tracejit.optimize_for_inference(
                tracejit.trace(net, (torch.randn(16, 64, device=device),), check_trace=False))

    # the layout the CPU's BLAS runs fastest, where it gives the plain layout's bits (16 rows by 64: it does here)
    assert transposed_weights(optimized("cpu").graph) == 2
    assert transposed_weights(optimized("meta").graph) == 0


def test_a_large_linear_off_the_cpu_is_never_left_to_onednn(monkeypatch):
    """The CPU hands a large linear to oneDNN (and keeps its weight plain for it); a weight on another device
    (meta standing for CUDA, whose layout was measured) gets the transposed layout instead."""
    from tracejit.passes import linear_weight_layout
    from tracejit.passes.linear_kernels import runs_in_onednn
    monkeypatch.setattr(linear_weight_layout, "MEASURED_DEVICES", ("cpu", "cuda", "meta"))
    net = nn.Sequential(nn.Linear(768, 3072), nn.GELU(), nn.Linear(3072, 768)).eval().to("meta")
    with torch.no_grad():
        traced = tracejit.trace(net, (torch.randn(4, 64, 768, device="meta"),), check_trace=False)
        optimized = tracejit.optimize_for_inference(traced)
    linears = [n for n in optimized.graph.nodes if n.op == "aten::linear.default"]
    assert len(linears) == 2 and not any(runs_in_onednn(n, torch.empty(3072, 768, device="meta")) for n in linears)
    assert linear_weight_layout.transposed_weights(optimized.graph) == 2
