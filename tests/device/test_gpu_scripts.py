"""bench/bench_gpu.py and scripts/gpu_check.sh on a machine without CUDA: they say why and stop (status 2)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present: scripts/gpu_check.sh runs these for real")


def _run(cmd, **env):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT, **env})


def test_bench_gpu_without_cuda_says_why():
    done = _run([sys.executable, "bench/bench_gpu.py", "--rows", "resnet50/1/fp32"])
    assert done.returncode == 2
    assert "needs a CUDA device: torch.cuda.is_available() is False" in done.stderr
    assert done.stdout == ""


def test_gpu_check_without_cuda_stops_before_running_anything(tmp_path):
    done = _run(["bash", "scripts/gpu_check.sh"], OUT=str(tmp_path), PYTHON=sys.executable)
    assert done.returncode == 2
    assert "no CUDA device" in (tmp_path / "device.txt").read_text()
    assert not (tmp_path / "pytest-cuda.txt").exists() and not (tmp_path / "bench_gpu.md").exists()
