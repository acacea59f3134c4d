"""Reading a file into memory: the CRC of the weights runs while the file is read, chunk by
chunk; any chunk size gives the same program, and a flipped byte anywhere is still caught."""
from __future__ import annotations

import pytest

import tracejit
from tracejit.serialize import loader

from security_testlib import output_sum


@pytest.mark.parametrize("chunk", [3, 8, 4096, 1 << 24])
def test_chunked_read_with_running_crc(bases, tmp_path, monkeypatch, chunk):
    traced, raw, inputs = bases["net"]
    monkeypatch.setattr(loader, "_CHUNK", chunk)
    path = tmp_path / "net.tjit"
    path.write_bytes(raw)
    assert output_sum(tracejit.load(path), inputs) == pytest.approx(output_sum(traced, inputs))
    header_end = 8 + int.from_bytes(raw[:8], "little")
    for at in (3, header_end - 2, header_end, header_end + 1, len(raw) // 2 + 1, len(raw) - 1):
        bad = bytearray(raw)
        bad[at] ^= 0x10
        path.write_bytes(bytes(bad))
        with pytest.raises(tracejit.LoadError):
            tracejit.load(path)
    path.write_bytes(raw[:-4])
    with pytest.raises(tracejit.LoadError):
        tracejit.load(path)


def test_weights_are_not_views_of_the_file(bases, tmp_path):
    """The default load owns its memory: rewriting the file changes nothing in the loaded program."""
    traced, raw, inputs = bases["net"]
    path = tmp_path / "net.tjit"
    path.write_bytes(raw)
    loaded = tracejit.load(path)
    want = output_sum(loaded, inputs)
    before = [p.detach().clone() for p in loaded.parameters()]
    with open(path, "r+b") as f:                # same size, all zeros, in place
        f.write(bytes(len(raw)))
    assert output_sum(loaded, inputs) == pytest.approx(want)
    assert all(a.equal(b) for a, b in zip(before, loaded.parameters()))
