"""Device paths on a real GPU (issue 23), beside eager on the same device: device-relative capture both ways,
literal devices, value guards (a device sync, which ``guards="shapes"`` avoids), save / load with
``map_location`` both ways, an optimized program loaded onto the GPU, the ONNX path from a CUDA trace, and the
CPU-only ONNX backends refusing CUDA programs and CUDA inputs with a clear error. tests/device/test_device_logic.py
proves the same logic with meta tensors on any machine. Skipped without CUDA.
"""
from __future__ import annotations

import io
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracejit
from tracejit.backends import cuda_pass_choice

from cuda_case import DEVICE, cpu_only_kernels, needs_cuda, no_tf32, real_cuda_only

pytestmark = [needs_cuda, pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")]


@pytest.fixture(autouse=True)
def _fp32():
    restore = no_tf32()
    yield
    restore()


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _relative(x):
    """Tensors made from the input's device, dtype and sizes (device-relative capture, docs/CAPTURE.md)."""
    n = x.shape[-1]
    scale = torch.arange(n, device=x.device, dtype=x.dtype) / n
    bias = torch.ones(1, device=x.device) * 0.5
    return (x * scale + bias).softmax(-1) - torch.zeros_like(x) + x.new_full((1,), 2.0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.up, self.down = nn.Linear(16 * 8 * 8, 512), nn.Linear(512, 10)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = torch.tanh(y * 0.5 + 1.0) * torch.sigmoid(y) - y.abs() / 3
        return self.down(F.gelu(self.up(y.flatten(1))))


def _net(device=DEVICE):
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
    return net.to(device)


def _x(batch, seed, device=DEVICE):
    return torch.randn(batch, 3, 8, 8, generator=_gen(seed)).to(device)


def _close(got, want, tol=1e-4):
    assert got.device == want.device, f"answer on {got.device}, eager's on {want.device}"
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * max(1.0, want.abs().max().item()))


def test_traced_on_the_cpu_runs_on_cuda_inputs_and_the_reverse():
    on_cpu = tracejit.trace(_relative, (torch.randn(2, 5),))
    on_gpu = tracejit.trace(_relative, (torch.randn(2, 5, device=DEVICE),))
    for shape, seed in (((3, 7), 1), ((1, 2), 2)):
        x = torch.randn(shape, generator=_gen(seed))
        _close(on_cpu(x.to(DEVICE)), _relative(x.to(DEVICE)))
        _close(on_gpu(x), _relative(x))
        _close(on_gpu(x.to(DEVICE)), _relative(x.to(DEVICE)))


def test_a_literal_device_stays_what_the_code_says():
    def to_device(x):
        return (x + 1).to(DEVICE) * 2

    traced = tracejit.trace(to_device, (torch.randn(2, 3),), check_trace=False)
    x = torch.randn(4, 3, generator=_gen(3))
    _close(traced(x), to_device(x))


def _branches(x):
    if x.sum() > 0:   # a value read: the guard reads it back from the device
        return x + 1
    return x - 1


def _syncs(seen) -> list:
    # what sync debug mode reports ("called a synchronizing CUDA operation"), not its note on itself
    return [str(w.message) for w in seen if "called a synchronizing" in str(w.message)]


@real_cuda_only
def test_a_value_guard_syncs_and_shapes_only_guards_do_not():
    full = tracejit.trace(_branches, (torch.ones(3, device=DEVICE),))
    shapes_only = tracejit.trace(_branches, (torch.ones(3, device=DEVICE),), guards="shapes")
    x = torch.ones(5, device=DEVICE)   # (made before the debug mode: a copy from the host syncs)
    full(x), shapes_only(x)   # warm: the first calls may compile
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            shapes_only(x)
            shapes_syncs = _syncs(seen)
            full(x)
            full_syncs = _syncs(seen)[len(shapes_syncs):]
        finally:
            torch.cuda.set_sync_debug_mode(0)
    assert shapes_syncs == [], shapes_syncs
    assert full_syncs, "the value guard reads the sum back from the device: a sync"
    neg = -torch.ones(4, device=DEVICE)
    _close(full(neg), _branches(neg))                                # the guard fails: eager's branch
    _close(shapes_only(neg), torch.zeros(4, device=DEVICE))         # shapes only: the traced branch, as documented


@real_cuda_only
def test_a_cnn_call_with_shape_guards_makes_no_device_sync():
    net = _net()
    with torch.no_grad():
        traced = tracejit.trace(net, (_x(2, 0),))
        optimized = tracejit.optimize_for_inference(traced)
        for program in (traced, optimized):
            program(_x(3, 1))
        x = _x(3, 2)   # (made before the debug mode: a copy from the host syncs)
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                traced(x), optimized(x)
            finally:
                torch.cuda.set_sync_debug_mode(0)
    assert _syncs(seen) == [], _syncs(seen)


def test_save_on_the_cpu_load_onto_cuda_and_back():
    cpu_net = _net("cpu")
    for optimize in (False, True):
        with torch.no_grad():
            traced = tracejit.trace(cpu_net, (_x(2, 0, "cpu"),))
            program = tracejit.optimize_for_inference(traced) if optimize else traced
        buf = io.BytesIO()
        tracejit.save(program, buf)
        buf.seek(0)
        loaded = tracejit.load(buf, map_location=DEVICE)
        held = [*loaded.parameters(), *loaded.buffers(), *(c for c in loaded.graph.constants
                                                            if isinstance(c, torch.Tensor))]
        assert {t.device.type for t in held} == {DEVICE.type}
        with torch.no_grad():
            again = tracejit.optimize_for_inference(loaded)
            x = _x(5, 4)
            want = _net()(x)
            _close(loaded(x), want, 1e-3 if optimize else 1e-4)
            _close(again(x), want, 1e-3)
        if DEVICE.type != "cpu":
            graph = again.forward.run_graph
            assert cpu_only_kernels(graph) == [], "a CPU-only kernel on CUDA"
        buf = io.BytesIO()
        tracejit.save(loaded, buf)
        buf.seek(0)
        back = tracejit.load(buf, map_location="cpu")
        with torch.no_grad():
            x = _x(1, 5, "cpu")
            _close(back(x), cpu_net(x), 1e-3 if optimize else 1e-4)


def test_export_onnx_of_a_cuda_trace_runs_in_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    net = _net()
    with torch.no_grad():
        traced = tracejit.trace(net, (_x(2, 0),))
        proto = tracejit.export_onnx(traced)
        session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        x = _x(3, 6, "cpu")
        got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
        _close(got, _net("cpu")(x), 1e-3)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_the_cpu_onnx_backends_refuse_a_cuda_program_and_cuda_inputs(backend):
    pytest.importorskip(backend)
    if DEVICE.type == "cpu":
        pytest.skip("a dry run on the CPU: nothing to refuse")
    with torch.no_grad():
        traced = tracejit.trace(_net(), (_x(2, 0),))
        with pytest.raises(ValueError, match=f"the {backend} backend runs on the CPU; this program holds tensors on "
                                             "cuda"):
            tracejit.optimize_for_inference(traced, backend=backend)
        cpu_program = tracejit.optimize_for_inference(tracejit.trace(_net("cpu"), (_x(2, 0, "cpu"),)), backend=backend)
        with pytest.raises(RuntimeError, match=f"the {backend} backend runs on the CPU and takes CPU tensors; "
                                               "argument '.*' is on cuda"):
            cpu_program(_x(2, 1))
        x = _x(2, 1, "cpu")
        _close(cpu_program(x), _net("cpu")(x), 1e-3)


def test_auto_on_cuda_leaves_the_cpu_engines_out_and_says_why():
    net = _net()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = tracejit.optimize_for_inference(tracejit.trace(net, (_x(1, 0),)), backend="auto", budget_s=4.0)
        x = _x(1, 7)
        _close(auto(x), net(x), 1e-3)
    if DEVICE.type != "cpu":
        for name in ("onnxruntime", "openvino"):
            line = next((ln for ln in auto.report.splitlines() if ln.strip().startswith(name + ":")), None)
            assert line is None or "runs on the CPU" in line or "not installed" in line, auto.report


class _ResBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.bn = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.b = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.bn(self.a(x)))
        return F.relu(self.b(y) + x)


@real_cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cudnn_fused_convs_give_eagers_answers_and_keep_nan(dtype, monkeypatch):
    monkeypatch.setattr(cuda_pass_choice, "MEASURE", False)   # the rewrite pinned; its timing: test_cuda_pass_choice.py
    from tracejit.kernels.cudnn_conv import fusion_keeps_nan
    from tracejit.passes.cuda_conv_kernels import cudnn_conv_nodes
    torch.manual_seed(0)
    net = _ResBlock().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
    net = net.to(DEVICE, dtype)
    x = torch.randn(2, 8, 10, 10, device=DEVICE, dtype=dtype)
    with torch.no_grad():
        traced = tracejit.trace(net, (x,))
        optimized = tracejit.optimize_for_inference(traced)
        graphs = tracejit.optimize_for_inference(traced, backend="cuda_graphs")
        fused = cudnn_conv_nodes(optimized.forward.run_graph)
        print("fusion keeps NaN:", fusion_keeps_nan(str(DEVICE if DEVICE.index is not None else "cuda:0")),
              "fused:", [n.attrs["ops"] for n in fused])
        if fusion_keeps_nan(f"cuda:{torch.cuda.current_device()}"):
            assert len(fused) == 2
        tol = 1e-3 if dtype == torch.float32 else 3e-2
        for shape in ((3, 8, 10, 10), (1, 8, 7, 12)):
            y = torch.randn(shape, device=DEVICE, dtype=dtype)
            for program in (optimized, graphs):
                _close(program(y).float(), net(y).float(), tol)
        bad = torch.randn(1, 8, 7, 12, device=DEVICE, dtype=dtype)
        bad[0, 0, 3, 3] = float("nan")
        want = torch.isnan(net(bad))
        assert want.any()
        for program in (optimized, graphs):
            assert torch.equal(torch.isnan(program(bad)), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_weights_on_cuda_are_stored_transposed_and_answers_stay_eagers(dtype, monkeypatch):
    monkeypatch.setattr(cuda_pass_choice, "MEASURE", False)   # the rewrite pinned; its timing: test_cuda_pass_choice.py
    from tracejit.passes.cuda_linear_kernels import cuda_linear_nodes
    from tracejit.passes.linear_weight_layout import transposed_weights
    torch.manual_seed(0)
    # BERT-base's sizes: large enough that the CPU would hand them to oneDNN (passes/linear_kernels.MIN_MACS)
    net = nn.Sequential(nn.Linear(768, 3072), nn.GELU(), nn.Linear(3072, 768), nn.LayerNorm(768)).eval().to(DEVICE, dtype)
    x = torch.randn(2, 64, 768, device=DEVICE, dtype=dtype)
    with torch.no_grad():
        traced = tracejit.trace(net, (x,))
        optimized = tracejit.optimize_for_inference(traced)
        graphs = tracejit.optimize_for_inference(traced, backend="cuda_graphs")
        if DEVICE.type == "cuda":   # (a dry run on the CPU hands these sizes to oneDNN instead)
            assert transposed_weights(optimized.graph) == 2   # the "nn" GEMM layout torch.jit's freeze runs
            # run as x @ Wt + b in float32; bfloat16 keeps F.linear (cuBLASLt's epilogue kernels are faster there)
            assert len(cuda_linear_nodes(optimized.forward.run_graph)) == (2 if dtype == torch.float32 else 0)
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        for shape in ((1, 1, 768), (4, 9, 768), (3, 768), (2, 700, 768)):   # the last: more rows than MAX_ROWS
            y = torch.randn(shape, device=DEVICE, dtype=dtype)
            want = net(y)
            assert want.std() > 0.1   # the input moves the output
            for program in (traced, optimized, graphs):
                _close(program(y).float(), want.float(), tol)
    _gradients_and_file_match(optimized, net, (torch.randn(3, 4, 768, device=DEVICE, dtype=dtype),),
                              (torch.randn(2, 3, 768, device=DEVICE, dtype=dtype),), tol)


def _gradients_and_file_match(optimized, net, args: tuple, new_args: tuple, tol: float) -> None:
    """Gradients through ``optimized`` (autograd: torch's ops, not the kernels) equal eager's for ``args[0]``, and
    the program saved and loaded answers as eager on ``new_args``."""
    x = args[0].requires_grad_(True)
    optimized(*args).float().square().sum().backward()
    got, x.grad = x.grad, None
    net(*args).float().square().sum().backward()
    _close(got.float(), x.grad.float(), tol * 10)
    with torch.no_grad():
        buffer = io.BytesIO()
        tracejit.save(optimized, buffer)
        buffer.seek(0)
        loaded = tracejit.load(buffer)
        _close(loaded(*new_args).float(), net(*new_args).float(), tol)


def test_load_without_map_location_puts_tensors_back_on_the_gpu_as_torch_jit_load_does():
    net = _net()
    x = _x(2, 4)
    with torch.no_grad():
        for program in (tracejit.trace(net, (x,)), tracejit.optimize_for_inference(tracejit.trace(net, (x,)))):
            buf = io.BytesIO()
            tracejit.save(program, buf)
            buf.seek(0)
            loaded = tracejit.load(buf)
            held = [t for t in loaded.state_dict().values()] + [c for _, _, g in loaded.program.graphs()
                                                                for c in g.constants if isinstance(c, torch.Tensor)]
            assert held and {t.device for t in held} == {x.device}
            y = _x(5, 4)
            _close(loaded(y), net(y), 1e-3)


class _SelfAttention(nn.Module):
    """BERT's attention at BERT-base's width: query, key and value read one input (passes/cuda_sibling_linears.py)."""

    def __init__(self, width=768, heads=12):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.out = (nn.Linear(width, width) for _ in range(4))
        self.norm = nn.LayerNorm(width)

    def forward(self, x, mask):
        b, s, w = x.shape
        q, k, v = (m(x).view(b, s, self.heads, -1).transpose(1, 2) for m in (self.query, self.key, self.value))
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, s, w)
        return self.norm(self.out(att) + x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_query_key_value_run_as_one_batched_gemm_and_answers_stay_eagers(dtype, monkeypatch):
    monkeypatch.setattr(cuda_pass_choice, "MEASURE", False)   # the rewrite pinned; its timing: test_cuda_pass_choice.py
    from tracejit.passes.cuda_sibling_linears import sibling_linear_nodes
    torch.manual_seed(0)
    net = _SelfAttention().eval().to(DEVICE, dtype)

    def inputs(b, s):
        return torch.randn(b, s, 768, device=DEVICE, dtype=dtype), torch.rand(b, 1, s, s, device=DEVICE) > 0.2
    with torch.no_grad():
        traced = tracejit.trace(net, inputs(2, 16))
        optimized = tracejit.optimize_for_inference(traced)
        graphs = tracejit.optimize_for_inference(traced, backend="cuda_graphs")
        if DEVICE.type == "cuda":
            assert len(sibling_linear_nodes(optimized.forward.run_graph)) == 1
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        for b, s in ((1, 1), (3, 7), (1, 128), (16, 128)):   # the last: 2048 rows
            x, mask = inputs(b, s)
            want = net(x, mask)
            assert want.std() > 0.1   # the input moves the output
            for program in (traced, optimized, graphs):
                _close(program(x, mask).float(), want.float(), tol)
    _gradients_and_file_match(optimized, net, inputs(2, 5), inputs(2, 9), tol)
