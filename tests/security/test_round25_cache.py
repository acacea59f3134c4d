"""The code cache (serialize/code_cache.py) holds at most MAX_TOTAL_BYTES in all, not only MAX_ENTRIES entries:
a crafted file's entry can be twice its header (a 5 MB file of 28,000 nodes wrote an 11.5 MB entry), so a service
handed 256 distinct files kept gigabytes (round 25, /work/wt/hostile25_findings.md). The newest entry always stays;
temporary files of a writer killed before its rename go once they are an hour old. And a complete file whose header
passes the header limit is told so (it was called "truncated")."""
from __future__ import annotations

import os
import time

import torch

import tracejit
from tracejit.serialize import code_cache


def _entries(where):
    return {e.name: e.stat().st_size for e in os.scandir(where) if e.name.endswith(".tjc")}


def _save(tmp_path, i):
    torch.manual_seed(i)
    path = tmp_path / f"m{i}.tjit"
    tracejit.save(tracejit.trace(torch.nn.Sequential(torch.nn.Linear(3 + i, 5), torch.nn.ReLU()),
                                 torch.randn(2, 3 + i)), str(path))
    return path


def test_the_cache_keeps_at_most_its_byte_budget_and_always_the_newest(tmp_path, monkeypatch):
    where = tmp_path / "cache"
    where.mkdir(mode=0o700)
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(where))
    files = [_save(tmp_path, i) for i in range(6)]
    tracejit.load(str(files[0]))
    one = max(_entries(where).values())
    monkeypatch.setattr(code_cache, "MAX_TOTAL_BYTES", int(2.5 * one), raising=False)
    for f in files[1:]:
        tracejit.load(str(f))
        time.sleep(0.01)   # distinct modification times: "newest" is well defined
    kept = _entries(where)
    assert sum(kept.values()) <= 2.5 * one + one / 2, kept   # sizes differ a little from program to program
    assert 1 <= len(kept) < 6, kept
    newest = max(os.scandir(where), key=lambda e: e.stat().st_mtime_ns if e.name.endswith(".tjc") else -1)
    assert newest.name in kept
    x = torch.randn(4, 8)   # the newest program still answers, from its entry
    assert torch.equal(tracejit.load(str(files[-1]))(x), tracejit.load(str(files[-1]))(x))
    assert len(_entries(where)) == len(kept)


def test_stale_temporary_files_go_and_fresh_ones_stay(tmp_path, monkeypatch):
    where = tmp_path / "cache"
    where.mkdir(mode=0o700)
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(where))
    old, fresh = where / ".abc.123.456.tmp", where / ".def.123.456.tmp"
    old.write_bytes(b"x" * 1000)
    fresh.write_bytes(b"x" * 1000)
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    tracejit.load(str(_save(tmp_path, 0)))
    assert not old.exists() and fresh.exists()


def test_a_whole_file_with_a_header_over_the_limit_is_told_so_not_called_truncated(tmp_path, monkeypatch):
    """A header of 16 MiB + 100 bytes (JSON padded with spaces, as safetensors pads it) in a complete file was
    refused as "truncated, or not a tracejit file"; it is the header limit (serialize/limits.MAX_HEADER)."""
    import io
    import struct

    import pytest
    from tracejit.serialize.limits import MAX_HEADER

    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")
    raw = _save(tmp_path, 0).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    pad = MAX_HEADER + 100 - n
    big = struct.pack("<Q", n + pad) + raw[8:8 + n] + b" " * pad + raw[8 + n:]
    with pytest.raises(tracejit.LoadError) as e:
        tracejit.load(io.BytesIO(big))
    assert f"claims {n + pad} bytes, more than the {MAX_HEADER}" in str(e.value) and "truncated" not in str(e.value)
