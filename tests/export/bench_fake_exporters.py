"""Stand-in exporters for tests/export/test_bench_ort_peer_bound.py: run in bench/peer_builders.export_in_child's
child process (a fresh interpreter) as ``function(fn, args)``; none imports torch, so the child starts fast."""
import os
import signal
import time


def allocate_quarter_gigabyte(fn, args):
    block = bytearray(2**28)   # 256 MiB, zero-filled
    return bytes(8), f"held {len(block)}"


def sleep_long(fn, args):
    time.sleep(60)
    return b"", ""


def refuse(fn, args):
    raise ValueError("Unsupported: ONNX export of operator aten::foo")


def die_like_the_oom_killer(fn, args):
    os.kill(os.getpid(), signal.SIGKILL)
