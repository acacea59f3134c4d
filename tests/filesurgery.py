"""File surgery on saved programs, shared by the save/load tests (tests/serialize) and the hostile-file
tests (tests/security): take a file apart, read its document, and set its checksum the way the format
says (a CRC is integrity, not authenticity: an edited file gets a correct one, so an edit reaches the
validation layer, not the CRC check).

The format (tracejit/serialize/archive.py): a safetensors file whose metadata has one key,
``tracejit``, a JSON document ``{"format", "schema_version", "tracejit_version", "crc32", "program"}``;
``crc32`` is the CRC32 of the whole file with its own 8 hex digits set to ``00000000``.
tests/conftest.py puts tests/ on sys.path, so test code imports this as ``filesurgery``.
"""
from __future__ import annotations

import json
import struct
import zlib

CRC_MARKER = b'crc32\\":\\"'


def split(raw: bytes):
    """(header dict, data bytes) of a safetensors file."""
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    return header, raw[8 + n:]


def parse(raw: bytes):
    """(program document, {name: tensor}) of a saved file."""
    from safetensors.torch import load as st_load
    header, _ = split(raw)
    doc = json.loads(header["__metadata__"]["tracejit"])
    return doc, dict(st_load(raw))


def fix_crc(raw: bytes) -> bytes:
    """Set the checksum field the way the format says: CRC32 of the file with the field zeroed."""
    raw = bytearray(raw)
    n = struct.unpack("<Q", raw[:8])[0]
    at = raw.find(CRC_MARKER, 8, 8 + n)
    assert at >= 0, "no crc32 field in the header"
    start = at + len(CRC_MARKER)
    raw[start:start + 8] = b"00000000"
    raw[start:start + 8] = f"{zlib.crc32(raw):08x}".encode()
    return bytes(raw)
