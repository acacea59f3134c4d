"""serialize/crc.combine joins two CRC-32s as zlib's crc32_combine does, with the zero-byte operators built once
per process: checked against zlib on the concatenation, for lengths whose bits need operators built later."""
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


def test_a_longer_length_extends_the_operators_and_an_empty_tail_keeps_the_crc():
    short = crc._zero_byte_operators(3)
    assert len(short) >= 3
    # a CRC of 2**40 zero bytes appended, reached through the operators alone: equal to squaring step by step
    ops = crc._zero_byte_operators(41)
    assert len(ops) >= 41 and ops[:3] == short[:3]
    assert crc._square(ops[39]) == ops[40]
    assert crc.combine(0x1234, 0x5678, 0) == 0x1234
    a, b = b"tracejit", b"\x00" * 1000
    assert crc.combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
