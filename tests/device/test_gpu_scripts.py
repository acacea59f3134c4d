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


def test_bench_gpu_dry_run_on_the_cpu_fills_the_table(tmp_path):
    """--device cpu --dry-run: tiny models through the same columns, cells and tables (not a measurement)."""
    out = tmp_path / "dry.json"
    done = _run([sys.executable, "bench/bench_gpu.py", "--device", "cpu", "--dry-run", "--rows", "bert/1/fp32",
                 "--columns", "eager_cuda_graph", "tracejit_cuda_graphs", "tracejit_cuda_graphs_bf16",
                 "--json", str(out)])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "DRY RUN on tiny models: not a measurement" in done.stdout
    assert "| bert/1/fp32 |" in done.stdout and "Largest absolute difference to eager" in done.stdout
    import json
    cells = json.loads(out.read_text())["results"][0]["cells"]
    assert set(cells) == {"eager", "eager_cuda_graph", "tracejit_cuda_graphs", "tracejit_cuda_graphs_bf16"}
    assert cells["eager_cuda_graph"] == {"skipped": "needs CUDA"}
    assert cells["tracejit_cuda_graphs"]["max_abs_diff"] < 1e-5 and cells["tracejit_cuda_graphs"]["ms"] > 0
    # on the CPU the default capturer takes nothing: every call ran the optimized program
    assert cells["tracejit_cuda_graphs"]["cuda_graphs"]["replays"] == 0
    assert 0 < cells["tracejit_cuda_graphs_bf16"]["max_abs_diff"] < 0.2   # bfloat16's error, reported


def test_bench_gpu_names_the_columns_it_knows(capsys):
    """In this process (argparse's error comes before any model is built; a fresh interpreter cost 4 s here)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import bench_gpu
        with pytest.raises(SystemExit) as done:
            bench_gpu.main(["--device", "cpu", "--dry-run", "--columns", "tensorrt"])
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))
    assert done.value.code == 2
    assert "unknown columns ['tensorrt']; columns are eager, eager_cuda_graph" in capsys.readouterr().err


def test_bench_zoo_lists_the_cuda_passes_each_cuda_row_kept():
    """A CUDA row carries the default backend's timed choice of lowering passes (backends/cuda_pass_choice.py);
    the table lists it under the summary, and a CPU row adds nothing."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import bench_zoo
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))
    row = {"model": "vit_tv", "batch": 1, "err": {"tracejit OFI": 1e-6}, "new": {}, "us": {}, "device": "cuda",
           "cuda_passes": "kept none: every pass 690.0 us, none 640.0 us"}
    cpu_row = {"model": "bert", "batch": 1, "err": {"tracejit OFI": 1e-6}, "new": {}, "us": {}}
    text = bench_zoo.render([row, cpu_row], quick=True, compile_=False)
    assert "CUDA lowering passes the build kept:\n- vit_tv b1: kept none: every pass 690.0 us" in text
    assert "- bert b1" not in text
    assert "CUDA lowering passes" not in bench_zoo.render([cpu_row], quick=True, compile_=False)
