"""bench/peer_builders.py's ORT peer exports with torch.onnx in a child process bounded in memory and time
(issue #25, zoo7: the dynamo exporter's 22.7 GB on vgg11_bn had the OOM killer stop the whole bench):
an export past its limits becomes a reason in the peer's cell, never the end of the bench. The child's
work is a stand-in (tests/export/bench_fake_exporters.py, no torch import): a real export in the child
(torch imported there, the model sent by torch.save) costs 2-5 s, more than a test may; every ORT cell of
the bench_zoo run is one (bench/RESULTS.md)."""
from __future__ import annotations

import os
import sys
import time

import pytest
import torch
from torch import nn

_BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)

import peer_builders  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux's")


def test_export_past_its_memory_limit_is_a_reason_and_the_parent_goes_on():
    work = "bench_fake_exporters:allocate_quarter_gigabyte"
    with pytest.raises(peer_builders.ExportLimitExceeded, match=r"^export > 0\.1 GB \(MemoryError"):
        peer_builders.export_in_child(None, (), memory_gb=0.1, time_s=60.0, export=work)
    # the same work under a limit it fits in: the bound is the reason, not the work
    assert peer_builders.export_in_child(None, (), memory_gb=1.0, time_s=60.0, export=work) == (bytes(8),
                                                                                                 f"held {2**28}")


def test_export_past_its_time_limit_is_killed_and_named():
    t0 = time.monotonic()
    with pytest.raises(peer_builders.ExportLimitExceeded, match=r"^export > 0\.5 s$"):
        peer_builders.export_in_child(None, (), memory_gb=1.0, time_s=0.5, export="bench_fake_exporters:sleep_long")
    assert time.monotonic() - t0 < 30   # killed at the limit, not waited for


def test_export_error_and_native_death_come_back_as_errors():
    with pytest.raises(RuntimeError, match=r"^ValueError: Unsupported: ONNX export of operator aten::foo$") as info:
        peer_builders.export_in_child(None, (), memory_gb=1.0, time_s=60.0, export="bench_fake_exporters:refuse")
    assert not isinstance(info.value, peer_builders.ExportLimitExceeded)
    with pytest.raises(peer_builders.ExportLimitExceeded, match=r"^export died \(killed by signal 9; limits 1 GB, 60 s\)"):
        peer_builders.export_in_child(None, (), memory_gb=1.0, time_s=60.0,
                                      export="bench_fake_exporters:die_like_the_oom_killer")


def test_a_function_that_cannot_be_pickled_is_exported_in_this_process():
    local = lambda x: x * 2 + 1   # noqa: E731  (a bench script's workload function)
    model_bytes, how = peer_builders._export_with_torch_onnx(local, (torch.randn(3),))
    assert how == "legacy exporter" and len(model_bytes) > 0
