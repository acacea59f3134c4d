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

import copy
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


def doc_text(doc, ensure_ascii: bool = True) -> str:
    """The document as save writes it (sorted keys, no spaces), with the checksum field zeroed."""
    doc = dict(doc)
    doc["crc32"] = "00000000"
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=ensure_ascii)


def assemble(doc_or_text, tensors, edit_text=None, ensure_ascii: bool = True) -> bytes:
    """A safetensors file holding ``tensors`` and the document (``edit_text`` may change its text last),
    with a correct crc."""
    from safetensors.torch import save as st_save
    text = doc_or_text if isinstance(doc_or_text, str) else doc_text(doc_or_text, ensure_ascii)
    if edit_text is not None:
        text = edit_text(text)
    return fix_crc(st_save(tensors, metadata={"tracejit": text}))


def rewrite(raw: bytes, edit_doc=None, edit_tensors=None, edit_text=None, ensure_ascii: bool = True) -> bytes:
    """Parse a saved file, apply edits (functions that change the document / the dict of tensors in
    place; what they return is ignored), re-serialize with safetensors and fix the crc."""
    doc, tensors = parse(raw)
    doc = copy.deepcopy(doc)
    if edit_doc is not None:
        edit_doc(doc)
    if edit_tensors is not None:
        edit_tensors(tensors)
    return assemble(doc, tensors, edit_text, ensure_ascii)
