"""bench/peer_builders.py's ORT peer exports with torch.onnx in a forked child bounded in memory and time
(issue #25, zoo7: the dynamo exporter's 22.7 GB on vgg11_bn had the OOM killer stop the whole bench):
an export past its limits becomes a reason in the peer's cell, never the end of the bench."""
from __future__ import annotations

import os
import signal
import sys
import time

import pytest
import torch
from torch import nn

_BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)

import peer_builders  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the bound needs os.fork (POSIX)")


def _allocate_gigabytes(gb: float):
    def export(fn, args):
        block = torch.ones(int(gb * 2**30 / 4))   # touched: the child really holds it
        return bytes(8), f"held {block.numel()}"
    return export


def test_export_runs_in_child_and_onnxruntime_matches_eager_on_other_values():
    ort = pytest.importorskip("onnxruntime")
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).eval()
    x = torch.randn(2, 4)
    model_bytes, how = peer_builders.export_in_child(model, (x,), memory_gb=2.0, time_s=120.0)
    assert how == "legacy exporter"
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    other = torch.randn(2, 4) * 3
    assert not torch.allclose(model(x), model(other))
    (got,) = session.run(None, {"input_0": other.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), model(other).detach())


def test_export_past_its_memory_limit_is_a_reason_and_the_parent_goes_on():
    with pytest.raises(peer_builders.ExportLimitExceeded, match=r"^export > 0\.25 GB \(.*allocate"):
        peer_builders.export_in_child(None, (), memory_gb=0.25, time_s=60.0, export=_allocate_gigabytes(1.0))
    # the same work under a limit it fits in: the bound is the reason, not the work
    data, how = peer_builders.export_in_child(None, (), memory_gb=1.0, time_s=60.0, export=_allocate_gigabytes(0.05))
    assert data == bytes(8) and how == f"held {int(0.05 * 2**30 / 4)}"


def test_export_past_its_time_limit_is_killed_and_named():
    def slow(fn, args):
        time.sleep(30)
        return b"", ""
    t0 = time.monotonic()
    with pytest.raises(peer_builders.ExportLimitExceeded, match=r"^export > 0\.3 s$"):
        peer_builders.export_in_child(None, (), memory_gb=1.0, time_s=0.3, export=slow)
    assert time.monotonic() - t0 < 20   # killed at the limit, not waited for


def test_export_error_and_native_death_come_back_as_errors():
    def refuses(fn, args):
        raise ValueError("Unsupported: ONNX export of operator aten::foo")
    with pytest.raises(RuntimeError, match=r"ValueError: Unsupported: ONNX export of operator aten::foo") as info:
        peer_builders.export_in_child(None, (), memory_gb=1.0, time_s=60.0, export=refuses)
    assert not isinstance(info.value, peer_builders.ExportLimitExceeded)
    with pytest.raises(peer_builders.ExportLimitExceeded, match=r"^export died \(killed by signal 9; limits 1 GB, 60 s\)"):
        # what the kernel's OOM killer does to a child
        peer_builders.export_in_child(None, (), memory_gb=1.0, time_s=60.0,
                                      export=lambda fn, args: os.kill(os.getpid(), signal.SIGKILL))
