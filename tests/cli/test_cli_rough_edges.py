"""The CLI's rough edges (issue 12 item 5): TorchScript and torch.save files named with the migration
command, a damaged header reported as a checksum mismatch, the full SHA-256, symbolic sizes marked."""
from __future__ import annotations

import hashlib
import re
import struct
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit import cli


class Net(nn.Module):
    """Reads the batch size (kept symbolic) and pins y's second size with a comparison (a guard)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x, y):
        batch = x.size(0)
        if y.size(1) == 5:
            y = y * 2
        return self.lin(x).reshape(batch, -1).sum(1) + y.sum(1)


def _example(batch=2):
    return torch.randn(batch, 4), torch.randn(batch, 5)


def _fails(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr()
    assert e.value.code == 1 and err.out == ""
    lines = err.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracejit: error: "), err.err
    return lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("rough")
    torch.manual_seed(0)
    model = Net().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # both tracers warn about the size comparison, on purpose
        torch.jit.save(torch.jit.trace(model, _example()), str(d / "old.pt"))
        traced = tracejit.trace(model, _example())
    torch.save(model.state_dict(), str(d / "weights.pt"))
    tracejit.save(traced, str(d / "net.tjit"))
    return d, model


@pytest.mark.parametrize("command", ["inspect", "run"])
def test_torchscript_archive_names_the_migration_command(files, capsys, command):
    d, _ = files
    path = str(d / "old.pt")
    line = _fails([command, path], capsys)
    assert "this is a TorchScript archive, not a tracejit program" in line, line
    assert f"tracejit migrate {path} -o {path[:-3]}.tjit --input" in line, line
    assert "header claims" not in line


@pytest.mark.parametrize("command", ["inspect", "run"])
def test_torch_save_file_is_named(files, capsys, command):
    d, _ = files
    line = _fails([command, str(d / "weights.pt")], capsys)
    assert "this is a torch.save file, not a tracejit program" in line and "tracejit migrate" in line, line


def _flip(src, dst, find: bytes, offset: int = 0, mask: int = 0x01):
    data = bytearray(src.read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    at = data.index(find, 8) + offset
    assert 8 <= at < 8 + n, "the flipped byte must lie inside the JSON header"
    data[at] ^= mask
    dst.write_bytes(bytes(data))
    return dst


@pytest.mark.parametrize("find, offset, mask, plain_error", [
    (b'"data_offsets"', 0, 0x01, "not valid JSON"),            # the header's JSON breaks
    (b'format', 3, 0x01, "wrong format marker"),               # the document's JSON stays valid
    (b'schema_version\\":', 17, 0x07, "schema version 4, newer"),   # the version digit, 3 -> 4
])
def test_flipped_header_byte_says_checksum(files, capsys, tmp_path, find, offset, mask, plain_error):
    d, _ = files
    bad = _flip(d / "net.tjit", tmp_path / "flipped.tjit", find, offset, mask)
    line = _fails(["inspect", str(bad)], capsys)
    assert "checksum mismatch" in line and "damaged" in line, line
    with pytest.raises(tracejit.LoadError, match="checksum mismatch"):
        tracejit.load(bad)
    # without the integrity check, the header's own complaint is all there is to say
    with pytest.raises(tracejit.LoadError, match=plain_error) as e:
        tracejit.load(bad, check_integrity=False)
    assert "checksum" not in str(e.value)


def test_intact_file_that_is_not_a_program_is_not_blamed_on_the_checksum(tmp_path, capsys):
    from safetensors.torch import save_file
    path = tmp_path / "plain.safetensors"
    save_file({"w": torch.randn(3)}, str(path))
    line = _fails(["inspect", str(path)], capsys)
    assert "not a tracejit program" in line and "checksum" not in line, line


def test_inspect_prints_the_full_sha256(files, capsys):
    d, _ = files
    assert cli.main(["inspect", str(d / "net.tjit")]) == 0
    out = capsys.readouterr().out
    digest = re.search(r"^\s+sha256:\s+(\S+)$", out, re.M).group(1)
    assert digest == hashlib.sha256((d / "net.tjit").read_bytes()).hexdigest() and len(digest) == 64


def test_inspect_marks_the_sizes_the_graph_keeps_symbolic(files, capsys):
    d, model = files
    assert cli.main(["inspect", str(d / "net.tjit")]) == 0
    out = capsys.readouterr().out
    # x's batch is read at run time: symbolic; y's second size is pinned by a guard; y's first is never read,
    # but must equal x's (the sum adds them): the viewer's probe moves it with s0
    assert "forward(x: Float[s0, 4], y: Float[s0, 5])" in out, out
    assert "s0, s1, ...: sizes the program accepts other values of" in out
    # what the marks claim holds: another batch size runs and matches eager and torch.jit.trace ...
    loaded = tracejit.load(d / "net.tjit")
    jit = torch.jit.load(str(d / "old.pt"))
    x, y = _example(batch=7)
    with torch.no_grad():
        got = loaded(x, y)
        torch.testing.assert_close(got, model(x, y))
        torch.testing.assert_close(got, jit(x, y))
    assert got.shape == (7,)
    # ... and the pinned size is held by a guard
    with pytest.raises(tracejit.GuardError):
        loaded(torch.randn(2, 4), torch.randn(2, 6))


def test_no_symbolic_sizes_no_legend(tmp_path, capsys):
    path = tmp_path / "fixed.tjit"
    tracejit.save(tracejit.trace(lambda x: x.reshape(12) * 2, (torch.randn(3, 4),)), path)   # fixed by a constant
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "(x: Float[3, 4])" in out and "s0, s1" not in out, out


def test_an_unread_batch_the_program_accepts_is_named(tmp_path, capsys):
    lin = nn.Linear(4, 2)
    traced = tracejit.trace(lin, (torch.randn(3, 4),))
    path = tmp_path / "lin.tjit"
    tracejit.save(traced, path)
    assert cli.main(["inspect", str(path)]) == 0
    assert "forward(input: Float[s0, 4])" in capsys.readouterr().out   # the weight fixes the 4
    x = torch.randn(9, 4)
    torch.testing.assert_close(tracejit.load(path)(x), lin(x))
