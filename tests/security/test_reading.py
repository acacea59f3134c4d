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


def test_a_flipped_byte_in_a_large_weight_is_caught_on_every_read_path(tmp_path, monkeypatch):
    """Weights of several MiB: the CRC of each chunk read runs on the second thread, through ISA-L (buffers of
    crc.FAST_FROM bytes and more), and the chunks' CRCs are combined; a file of one chunk is summed in one pass
    after the read. Either way one flipped bit in the middle of the weights is refused."""
    import torch
    from tracejit.serialize import crc
    torch.manual_seed(0)
    lin = torch.nn.Linear(1024, 2048)   # 8 MiB of weights
    x = torch.randn(3, 1024)
    path = tmp_path / "big.tjit"
    tracejit.save(tracejit.trace(lin, x), path)
    raw = path.read_bytes()
    assert len(raw) > 4 * crc.FAST_FROM
    bad = bytearray(raw)
    bad[len(raw) // 2] ^= 0x01
    for chunk in (3 << 20, 1 << 24):   # chunks on the CRC thread (combined), and one chunk (no thread)
        monkeypatch.setattr(loader, "_CHUNK", chunk)
        path.write_bytes(raw)
        torch.testing.assert_close(tracejit.load(path)(x), lin(x))
        path.write_bytes(bytes(bad))
        with pytest.raises(tracejit.LoadError, match="checksum mismatch"):
            tracejit.load(path)
