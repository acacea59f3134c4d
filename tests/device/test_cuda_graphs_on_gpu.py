"""The CUDA-graph backend on a real GPU (backends/cuda_graphs.py; its logic is proved on the CPU in
tests/backends/test_cuda_graphs.py): eager's answers on new shapes from replayed graphs, no output aliasing
across calls, a failed capture falling back, bfloat16's error reported. Skipped without CUDA (scripts/gpu_check.sh
runs them on a GPU machine)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch import nn

import tracejit

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="no CUDA device here (torch.cuda.is_available() is False): "
                                        "tests/backends/test_cuda_graphs.py proves the logic on the CPU"),
              pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def _no_tf32():
    """fp32 without TF32, so a replay and eager agree to float32 rounding."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.conv2(y)) + 0.5
        return self.fc(y.mean((2, 3))).log_softmax(-1)


def _cnn():
    torch.manual_seed(0)
    net = SmallCnn().eval()
    with torch.no_grad():
        net.bn1.running_mean.uniform_(-1, 1)
        net.bn1.running_var.uniform_(0.5, 2)
    return net.to(CUDA)


def _image(batch, seed, size=16):
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed)).to(CUDA)


def _close(got, want):
    scale = max(1.0, want.abs().max().item())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * scale)


def test_replays_give_eagers_answer_on_new_shapes():
    model = _cnn()
    program = tracejit.optimize_for_inference(tracejit.trace(model, (_image(2, 0),)), backend="cuda_graphs")
    with torch.no_grad():
        for batch, size, seed in ((1, 16, 1), (5, 16, 2), (1, 16, 3), (3, 24, 4), (5, 16, 5)):
            x = _image(batch, seed, size)
            _close(program(x), model(x))
    assert program.not_captured == "" and program.signatures == 3
    assert program.stats["replays"] == 5 and program.stats["program_runs"] == 0


def test_outputs_do_not_alias_across_calls_unless_asked():
    model = _cnn()
    traced = tracejit.trace(model, (_image(2, 0),))
    program = tracejit.optimize_for_inference(traced, backend="cuda_graphs")
    reused = tracejit.optimize_for_inference(traced, backend="cuda_graphs", reuse_outputs=True)
    with torch.no_grad():
        first = program(_image(4, 1))
        kept = first.clone()
        second = program(_image(4, 2))
        torch.cuda.synchronize()
        assert torch.equal(first, kept) and first.data_ptr() != second.data_ptr()
        _close(second, model(_image(4, 2)))
        a = reused(_image(4, 1))
        b = reused(_image(4, 2))
        assert a.data_ptr() == b.data_ptr()   # the static buffer, as asked
        _close(a, model(_image(4, 2)))


def test_a_bert_encoder_on_new_lengths():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    model = transformers.BertModel(config).eval().to(CUDA)
    ids = torch.randint(0, 1000, (2, 16), device=CUDA)
    traced = tracejit.trace(model, (ids, torch.ones_like(ids)), strict=False)
    program = tracejit.optimize_for_inference(traced, backend="cuda_graphs")
    with torch.no_grad():
        for batch, length in ((1, 16), (3, 9), (1, 16)):
            ids = torch.randint(0, 1000, (batch, length), device=CUDA)
            mask = torch.ones_like(ids)
            mask[0, length // 2:] = 0
            _close(program(ids, mask)["last_hidden_state"], model(ids, mask).last_hidden_state)
    assert program.stats["replays"] == 3


def test_bfloat16_is_close_to_float32_eager():
    model = _cnn()
    program = tracejit.optimize_for_inference(tracejit.trace(model, (_image(2, 0),)), backend="cuda_graphs",
                                              dtype=torch.bfloat16)
    with torch.no_grad():
        x = _image(8, 3)
        got, want = program(x), model(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=5e-2, atol=5e-2)


def test_a_capture_that_fails_falls_back_with_a_warning():
    # in a child process: a failed capture must not leave this process's CUDA state to the other tests
    script = textwrap.dedent("""
        import warnings, torch, tracejit
        def g(x):   # repeat_interleave without output_size reads its output's length on the host: a sync
            return x * 2 + torch.repeat_interleave(x.abs().long().clamp(max=2)).sum()
        x = torch.randn(5, device="cuda")
        traced = tracejit.trace(g, (x,), check_trace=False)
        program = tracejit.optimize_for_inference(traced, backend="cuda_graphs")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for seed in (1, 2):
                y = torch.randn(5, generator=torch.Generator().manual_seed(seed)).cuda()
                torch.testing.assert_close(program(y), g(y))
        print("warnings:", [str(w.message) for w in seen if "capture failed" in str(w.message)])
        print("stats:", program.stats)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the CUDA graph capture failed" in done.stdout
    assert "'failed_captures': 1" in done.stdout and "'replays': 0" in done.stdout and "'program_runs': 2" in done.stdout


def test_auto_times_cuda_graphs_for_a_cuda_program():
    model = _cnn()
    traced = tracejit.trace(model, (_image(1, 0),))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = tracejit.optimize_for_inference(traced, backend="auto", candidates=("traced", "cuda_graphs"),
                                               budget_s=6.0)   # builds stop at half the budget: room for both
    assert "cuda_graphs:" in auto.report and "not built" not in auto.report.split("cuda_graphs:")[1].splitlines()[0]
    with torch.no_grad():
        _close(auto(_image(1, 5)), model(_image(1, 5)))
