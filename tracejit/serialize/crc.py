"""CRC-32 (zlib's) of large buffers, on several threads.

The CRC functions release the GIL on large inputs, so halves of a buffer can be
summed at once; ``combine`` joins two CRCs the way zlib's crc32_combine does (zlib 1.2.12's
method: multiply crc(A) by x**(8 * len(B)) modulo the CRC polynomial, the power read from a table
of x**(2**k); 32 numbers, built on first use in well under a millisecond).

ISA-L (``isal``) computes the same CRC-32 about 5x faster than zlib on large buffers; it is imported
the first time a buffer of ``FAST_FROM`` bytes or more is summed, so a small file's load does not pay
for its import (server start, docs/DEPLOY.md).
"""
from __future__ import annotations

import struct
import zlib
from concurrent.futures import ThreadPoolExecutor

from ..errors import LoadError
from ..patterns import LazyPattern
from .file_format import CRC_PLACEHOLDER as _CRC_PLACEHOLDER, MAX_HEADER

_POLY = 0xEDB88320   # the CRC-32 polynomial, bit-reflected (as zlib writes it)
FAST_FROM = 1 << 20  # bytes: from this size a buffer is summed by ISA-L (when installed)

_fast = None   # ISA-L's crc32 once imported (zlib's where isal is missing)


def _crc32(data, value: int = 0) -> int:
    """zlib.crc32 of ``data`` continuing from ``value``; ISA-L's for large buffers (the same values)."""
    global _fast
    if memoryview(data).nbytes < FAST_FROM:
        return zlib.crc32(data, value)
    if _fast is None:
        try:
            from isal.isal_zlib import crc32 as fast   # first large buffer only: a small file's load never imports ISA-L
        except ImportError:  # pragma: no cover - isal is a declared dependency; zlib gives the same values
            fast = zlib.crc32
        _fast = fast
    return _fast(data, value)


def _multiply(a: int, b: int) -> int:
    """a(x) * b(x) modulo the CRC polynomial, both bit-reflected (zlib's multmodp)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if not a & (m - 1):
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


_powers: tuple = ()   # [k]: x**(2**k) modulo the polynomial, k = 0..31 (built on first use)


def _x_powers() -> tuple:
    global _powers
    if not _powers:
        table = [1 << 30]   # x**1
        for _ in range(31):
            table.append(_multiply(table[-1], table[-1]))
        _powers = tuple(table)   # a whole new tuple: a concurrent reader sees none or all of it
    return _powers


def _x_to_the(n: int, k: int) -> int:
    """x**(n * 2**k) modulo the polynomial (zlib's x2nmodp); the powers of x repeat with period 2**32 - 1,
    which the table's index wrapping at 32 reflects."""
    table = _x_powers()
    p = 1 << 31   # x**0
    while n:
        if n & 1:
            p = _multiply(table[k & 31], p)
        n >>= 1
        k += 1
    return p


def combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC of A + B from crc(A), crc(B) and len(B)."""
    if len2 <= 0:
        return crc1
    return _multiply(_x_to_the(len2, 3), crc1) ^ crc2


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
    """CRC-32 of the buffers one after another, continuing from ``value`` (ISA-L for large ones)."""
    for data in buffers:
        value = _crc32(data, value)
    return value


# the stored CRC as it shows in the raw header (the document is JSON inside a JSON string)
_STORED_CRC = LazyPattern(rb'crc32\\":\\"([0-9a-f]{8})')


def blame_checksum(buf, data_crc, error: LoadError) -> None:
    """(serialize/loader.py) The header does not read as a tracejit program: when the CRC stored in it still shows and the
    file's bytes do not give it, the file is damaged (a flipped byte): raise that instead."""
    if len(buf) < 8:
        return
    header_len = struct.unpack("<Q", bytes(buf[:8]))[0]
    if header_len > min(MAX_HEADER, len(buf) - 8):
        return
    m = _STORED_CRC.search(bytes(buf[8:8 + header_len]))
    if m is None:
        return
    try:
        check_crc(buf, header_len, m.group(1).decode(), data_crc)
    except LoadError as crc_error:
        raise LoadError(f"{crc_error}; the header does not read either ({error})") from None


def check_crc(buf, header_len: int, stored, data_crc=None) -> None:
    if not isinstance(stored, str) or len(stored) != 8:
        raise LoadError("the file has no valid checksum")
    marker = f'crc32\\":\\"{stored}'.encode()
    header = bytes(buf[8:8 + header_len])
    at = header.find(marker)
    if at < 0:
        raise LoadError("the checksum field could not be found in the header")
    zeroed = header[:at + len(marker) - 8] + _CRC_PLACEHOLDER.encode() + header[at + len(marker):]
    crc = zlib.crc32(bytes(buf[:8]))
    crc = zlib.crc32(zeroed, crc)
    if data_crc is not None and data_crc[1] == 8 + header_len:   # computed while reading
        crc = combine(crc, data_crc[0], len(buf) - data_crc[1])
    else:
        crc = crc32(buf, 8 + header_len, value=crc)
    if f"{crc:08x}" != stored:
        raise LoadError(f"checksum mismatch: the file says {stored}, its contents give {crc:08x}; the file is "
                        "damaged (a flipped byte, a truncation, or an edit)")
