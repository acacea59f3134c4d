"""serialize/crc.combine joins two CRC-32s as zlib's crc32_combine does (zlib 1.2.12's table of x**(2**k)):
checked against zlib on the concatenation, for lengths of many bit patterns, up to lengths past 2**32 (the
powers of x wrap around), and ``crc32`` / ``crc_of`` give zlib's values on both sides of the size from which
ISA-L sums (imported only then)."""
from __future__ import annotations

import random
import zlib

import pytest
import torch

from tracejit.serialize import crc


@pytest.mark.parametrize("len_b", [1, 2, 3, 7, 8, 255, 4096, 65537, 1_000_003])
def test_combine_equals_the_crc_of_the_concatenation(len_b):
    rng = random.Random(len_b)
    a = rng.randbytes(rng.randrange(0, 300))
    b = rng.randbytes(len_b)
    assert crc.combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_zero_bytes_of_any_length_match_zlib_and_an_empty_tail_keeps_the_crc():
    a = b"tracejit"
    for n in (1, 1000, 2**20 + 3):
        b = b"\x00" * n
        assert crc.combine(zlib.crc32(a), zlib.crc32(b), n) == zlib.crc32(a + b)
    assert crc.combine(0x1234, 0x5678, 0) == 0x1234
    # lengths past 2**32 (the table's index wraps at 32): x**(8 * (2**32 - 1)) is 1 modulo the polynomial, so
    # 2**32 - 1 bytes whose own CRC is 0 leave a CRC as it was, and a long length equals two halves in a row
    assert crc.combine(0xDEADBEEF, 0, 2**32 - 1) == 0xDEADBEEF
    n = 2**40 + 12345
    assert crc.combine(0xDEADBEEF, 0, n) == crc.combine(crc.combine(0xDEADBEEF, 0, n // 2), 0, n - n // 2)


def _bytes(n: int, seed: int) -> bytes:
    """``n`` bytes without a short period, made in milliseconds (random.randbytes takes ~0.1 s per 8 MiB)."""
    words = torch.arange(n // 8 + 1, dtype=torch.int64) * (2654435761 + seed) % 4294967291
    return words.numpy().tobytes()[:n]


def test_large_and_small_buffers_give_zlibs_crc():
    small = _bytes(crc.FAST_FROM - 1, 1)
    large = _bytes(crc.FAST_FROM * 9, 2)   # above crc32's split across threads (8 MiB) too
    assert crc.crc_of([small, large], 5) == zlib.crc32(large, zlib.crc32(small, 5))
    assert crc.crc32(large, 3, value=11) == zlib.crc32(large[3:], 11)


def test_threads_that_build_the_lazy_state_at_once_all_get_zlibs_values(monkeypatch):
    """The table of powers and ISA-L's function are made on first use; 8 threads using them first at the same
    time (a server loading several files at once) all get zlib's values."""
    import threading
    monkeypatch.setattr(crc, "_powers", ())
    monkeypatch.setattr(crc, "_fast", None)
    rng = random.Random(3)
    a, b = rng.randbytes(1000), rng.randbytes(crc.FAST_FROM + 17)
    want = (zlib.crc32(a + b), zlib.crc32(b))
    start, got = threading.Barrier(8), []

    def first_use():
        start.wait()
        got.append((crc.combine(zlib.crc32(a), crc.crc_of([b]), len(b)), crc.crc_of([b])))
    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 8
