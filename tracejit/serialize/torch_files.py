"""Recognise files tracejit.load cannot read but a user may hand it: TorchScript archives and
torch.save files. Reads only the bytes it needs (the first 16, then the zip's end records and
central directory, at most ``MAX_READ`` bytes): no copy of the file, no unpickling, nothing runs."""
from __future__ import annotations

import io
import os
import zipfile

from ..errors import LoadError

# what a legacy (non-zip) torch.save file starts with: pickle protocol 2, then torch's magic number
_LEGACY_TORCH_SAVE = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"
_ZIP = b"PK\x03\x04"
MAX_READ = 8 << 20   # bytes detection may read from a zip: its end records and central directory


class _TooMuch(Exception):
    pass


class _BoundedReader(io.RawIOBase):
    """A read-only, seekable view of bytes-like contents or of an open binary file that refuses to
    read more than ``limit`` bytes in all (so a huge central directory costs nothing)."""

    def __init__(self, source, limit: int):
        self._file = None if _is_bytes_like(source) else source
        self._view = None if self._file is not None else memoryview(source).cast("B")
        self._size = len(self._view) if self._view is not None else self._file.seek(0, os.SEEK_END)
        self._pos, self._left = 0, limit

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise OSError("seek before the start of the file")
        self._pos = base + offset
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        count = max(0, end - self._pos)
        if count > self._left:
            raise _TooMuch
        self._left -= count
        if self._view is not None:
            data = bytes(self._view[self._pos:end])
        else:
            self._file.seek(self._pos)
            data = self._file.read(count)
        self._pos += len(data)
        return data

    def close(self) -> None:
        if self._view is not None:
            self._view.release()   # a view of an mmap must go before the mmap can close
        super().close()


def _is_bytes_like(source) -> bool:
    try:
        memoryview(source).release()
    except TypeError:
        return False
    return True


def is_torch_file(source) -> str | None:
    """``"torchscript"``, ``"torch.save"`` or None for a file's contents: bytes-like (bytes, an mmap)
    or an open, seekable binary file (its position is left where it was)."""
    start = None if _is_bytes_like(source) else source.tell()
    try:
        with _BoundedReader(source, MAX_READ) as reader:
            head = reader.read(len(_LEGACY_TORCH_SAVE))
            if head.startswith(_LEGACY_TORCH_SAVE):
                return "torch.save"
            if not head.startswith(_ZIP):
                return None
            try:
                names = zipfile.ZipFile(reader).namelist()
            except Exception:   # noqa: BLE001  any zip the zipfile module cannot read (a version it does
                return None     # not implement, bad names, ...) is not a torch file: the loader says why
    finally:
        if start is not None:
            source.seek(start)
    if any(n.split("/", 1)[-1].startswith(("code/", "constants.pkl")) for n in names):
        return "torchscript"
    if any(n.endswith("data.pkl") for n in names):
        return "torch.save"
    return None


def raise_if_torch_file(buf) -> None:
    """Raise ``LoadError`` naming the migration route when ``buf`` is a TorchScript or torch.save file."""
    kind = is_torch_file(buf)
    if kind is None:
        return
    if kind == "torchscript":
        raise LoadError("this is a TorchScript archive, not a tracejit program; migrate it with "
                        "tracejit.migrate(path, example_inputs) or `tracejit migrate OLD.pt -o NEW.tjit --input ...` "
                        "(only for files you trust: migrating runs the archive's TorchScript)")
    raise LoadError("this is a torch.save file, not a tracejit program; if it holds a TorchScript module, migrate it "
                    "with tracejit.migrate(...) / `tracejit migrate`; if it holds weights, load them into the model "
                    "and trace it with tracejit.trace")
