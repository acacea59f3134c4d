"""Recognise files tracejit.load cannot read but a user may hand it: TorchScript archives and
torch.save files. Reads only the file's bytes (no unpickling, nothing runs)."""
from __future__ import annotations

import io
import zipfile

from ..errors import LoadError

# what a legacy (non-zip) torch.save file starts with: pickle protocol 2, then torch's magic number
_LEGACY_TORCH_SAVE = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"
_ZIP = b"PK\x03\x04"


def is_torch_file(buf) -> str | None:
    """``"torchscript"``, ``"torch.save"`` or None for the file contents ``buf`` (bytes-like)."""
    head = bytes(buf[:len(_LEGACY_TORCH_SAVE)])
    if head.startswith(_LEGACY_TORCH_SAVE):
        return "torch.save"
    if not head.startswith(_ZIP):
        return None
    try:
        names = zipfile.ZipFile(io.BytesIO(memoryview(buf))).namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
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
