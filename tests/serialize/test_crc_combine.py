"""serialize/crc.combine joins two CRC-32s as zlib's crc32_combine does (zlib 1.2.12's table of x**(2**k)):
checked against zlib on the concatenation, for lengths of many bit patterns, up to lengths past 2**32 (the
powers of x wrap around), and ``crc32`` / ``crc_of`` give zlib's values on both sides of the size from which
ISA-L sums (imported only then)."""
from __future__ import annotations

import random
import zlib

import pytest

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


def test_large_and_small_buffers_give_zlibs_crc():
    rng = random.Random(7)
    small = rng.randbytes(crc.FAST_FROM - 1)
    large = rng.randbytes(crc.FAST_FROM * 9)   # above crc32's split across threads (8 MiB) too
    assert crc.crc_of([small, large], 5) == zlib.crc32(large, zlib.crc32(small, 5))
    assert crc.crc32(large, 3, value=11) == zlib.crc32(large[3:], 11)
