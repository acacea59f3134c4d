"""The CLI reads headers and names dtypes with serialize's code (issue 12 item 4): one header reader
(serialize/loader.py ``read_header``), one dtype-name table (serialize/encode.py ``dtype_name``)."""
from __future__ import annotations

import json
import re
import struct

import pytest
import torch
from torch import nn

import tracejit
from tracejit import cli
from tracejit.cli.common import CLIError
from tracejit.cli.inspect import read_document
from tracejit.serialize import encode, loader


class Mixed(nn.Module):
    """Buffers of several dtypes; the output depends on the input and on every buffer."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("half_scale", torch.full((3,), 2.0, dtype=torch.bfloat16))
        self.register_buffer("offset", torch.tensor([1, 2, 3], dtype=torch.int8))

    def forward(self, x):
        return self.lin(x) * self.half_scale.float() + self.offset


def _saved(tmp_path) -> str:
    path = str(tmp_path / "mixed.tjit")
    tracejit.save(tracejit.trace(Mixed().eval(), (torch.randn(2, 4),)), path)
    return path


def _rewrite_header(path: str, out: str, edit) -> str:
    """Copy ``path`` to ``out`` with its safetensors header text replaced by ``edit(text)``."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    text = edit(data[8:8 + n].decode())
    raw = text.encode()
    open(out, "wb").write(struct.pack("<Q", len(raw)) + raw + data[8 + n:])
    return out


def test_read_document_is_the_loaders(tmp_path, monkeypatch):
    path = _saved(tmp_path)
    data = open(path, "rb").read()
    assert read_document(path) == loader.read_header(data)[2]
    calls = []
    real = loader.read_header
    monkeypatch.setattr(loader, "read_header", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert cli.main(["inspect", path]) == 0
    assert calls, "inspect did not read the header through serialize/loader.py"


def test_read_document_refuses_what_the_loader_refuses(tmp_path):
    path = _saved(tmp_path)
    # a newer schema version: the loader's words, which the old copy in the CLI did not check
    newer = _rewrite_header(path, str(tmp_path / "newer.tjit"),
                            lambda t: re.sub(r'schema_version\\": ?\d+', 'schema_version\\\\": 99', t, count=1))
    with pytest.raises(CLIError, match="schema version 99, newer than this tracejit"):
        read_document(newer)
    # a key named twice in the header: refused by the loader, accepted by a plain json.loads
    dup = _rewrite_header(path, str(tmp_path / "dup.tjit"),
                          lambda t: t.replace("{", '{"__metadata__": {}, ', 1))
    with pytest.raises(CLIError, match="twice"):
        read_document(dup)


def test_inspect_names_dtypes_as_serialize_does(tmp_path, capsys):
    path = _saved(tmp_path)
    assert cli.main(["inspect", path]) == 0
    out = capsys.readouterr().out
    for name, dtype in [("half_scale", torch.bfloat16), ("offset", torch.int8), ("lin.weight", torch.float32)]:
        assert re.search(rf"^\s+{re.escape(name)}\s+(buffer|param)\s", out, re.M)
        row = next(line for line in out.splitlines() if line.strip().startswith(name + " "))
        assert encode.dtype_name(dtype) in row.split(), row
    assert cli.common.dtype_name is encode.dtype_name
