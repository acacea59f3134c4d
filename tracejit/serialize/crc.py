"""CRC-32 (zlib's) of large buffers, on several threads.

The CRC functions release the GIL on large inputs, so halves of a buffer can be
summed at once; ``combine`` joins two CRCs the way zlib's crc32_combine does
(by multiplying with the matrix of "append n zero bytes" over GF(2)); the matrices for 2**k zero
bytes are squared once per process, not at every load.
"""
from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor

try:  # ISA-L computes zlib's CRC-32 about 5x faster; the values are the same
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a declared dependency; zlib gives the same values
    _crc32 = zlib.crc32

_POLY = 0xEDB88320


def _times(mat: list[int], vec: int) -> int:
    out = 0
    i = 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _square(mat: list[int]) -> list[int]:
    return [_times(mat, mat[n]) for n in range(32)]


_zero_bytes: tuple = ()   # [k]: the operator that appends 2**k zero bytes, built once per process (combine)


def _zero_byte_operators(n: int) -> tuple:
    """The operators for 1, 2, 4, ... 2**(n-1) zero bytes; built on first use, extended when a longer
    length comes (thread-safe: a new tuple replaces the old whole)."""
    global _zero_bytes
    ops = _zero_bytes
    if len(ops) < n:
        grown = list(ops)
        if not grown:
            one_bit = [_POLY] + [1 << k for k in range(31)]
            grown.append(_square(_square(_square(one_bit))))   # 2, 4, 8 zero bits: one zero byte
        while len(grown) < n:
            grown.append(_square(grown[-1]))
        ops = _zero_bytes = tuple(grown)
    return ops


def combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC of A + B from crc(A), crc(B) and len(B)."""
    if len2 <= 0:
        return crc1
    ops = _zero_byte_operators(len2.bit_length())
    k = 0
    while len2:
        if len2 & 1:
            crc1 = _times(ops[k], crc1)
        len2 >>= 1
        k += 1
    return crc1 ^ crc2


def crc32(buffer, start: int = 0, workers: int = 2, value: int = 0) -> int:
    """CRC-32 of ``buffer[start:]`` continuing from ``value``; large buffers are split across threads."""
    view = memoryview(buffer)[start:]
    n = len(view)
    try:
        if n < 8 * 1024 * 1024 or workers < 2:
            return _crc32(view, value)
        step = (n + workers - 1) // workers
        parts = [view[i:i + step] for i in range(0, n, step)]
        with ThreadPoolExecutor(len(parts)) as pool:
            crcs = list(pool.map(_crc32, parts))
        out = value
        for part, c in zip(parts, crcs):
            out = combine(out, c, len(part))
        for p in parts:
            p.release()
        return out
    finally:
        view.release()


def crc_of(buffers, value: int = 0) -> int:
    """CRC-32 of the buffers one after another, continuing from ``value`` (ISA-L when available)."""
    for data in buffers:
        value = _crc32(data, value)
    return value
