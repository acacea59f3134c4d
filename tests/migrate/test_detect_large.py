"""serialize/torch_files.py (was migrate/detect.py) reads only the bytes it needs: a 1 GiB zip-looking file (sparse: a hole, no
real write) is recognised, or not, without copying it into memory."""
from __future__ import annotations

import io
import mmap
import tracemalloc
import warnings
import zipfile

import pytest
import torch
from torch import nn

from tracejit import cli
from tracejit.migrate import detect, is_torch_file

GIB = 1 << 30
BUDGET = 16 << 20   # Python allocations allowed while detecting (the old code copied the whole file)


def _torchscript_bytes() -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(nn.Linear(3, 2), torch.randn(1, 3)), buf)
    return buf.getvalue()


def _sparse(path, tail: bytes) -> str:
    """``PK\\x03\\x04``, a hole up to 1 GiB, then ``tail``: zipfile finds an archive placed at the end."""
    with open(path, "wb") as f:
        f.write(b"PK\x03\x04")
        f.truncate(GIB)
        f.seek(GIB)
        f.write(tail)
    return str(path)


def _peak(fn):
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("tail,kind", [(None, "torchscript"), (b"", None)], ids=["archive-at-end", "no-archive"])
def test_a_large_zip_looking_file_is_not_copied(tmp_path, tail, kind):
    path = _sparse(tmp_path / "big.pt", _torchscript_bytes() if tail is None else tail)
    with open(path, "rb") as f:
        f.seek(5)
        result, peak = _peak(lambda: is_torch_file(f))
        assert (result, f.tell()) == (kind, 5)   # the caller's position is kept
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            result_m, peak_m = _peak(lambda: is_torch_file(m))
    assert result_m == kind
    assert peak < BUDGET and peak_m < BUDGET, (peak, peak_m)


def test_inspect_names_a_large_torchscript_archive(tmp_path, capsys):
    path = _sparse(tmp_path / "big.pt", _torchscript_bytes())
    with pytest.raises(SystemExit):
        cli.main(["inspect", path])
    assert "this is a TorchScript archive" in capsys.readouterr().err


def test_a_huge_central_directory_is_not_read(monkeypatch):
    """Past MAX_READ bytes detection gives up (None: not recognised) instead of reading on."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for i in range(200):
            z.writestr(f"archive/code/part_{i:04d}.py", "")
    data = buf.getvalue()
    assert is_torch_file(data) == "torchscript"
    monkeypatch.setattr(detect, "MAX_READ", len(data) // 4)
    assert is_torch_file(data) is None
    assert is_torch_file(io.BytesIO(data)) is None


def test_bytes_and_files_agree(tmp_path):
    data = _torchscript_bytes()
    legacy = io.BytesIO()
    torch.save({"w": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    for contents, kind in ((data, "torchscript"), (legacy.getvalue(), "torch.save"), (b"PK\x03\x04", None),
                           (b"", None), (b"\x00" * 100, None)):
        assert is_torch_file(contents) == kind
        assert is_torch_file(bytearray(contents)) == kind
        assert is_torch_file(io.BytesIO(contents)) == kind
