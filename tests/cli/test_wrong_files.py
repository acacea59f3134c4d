"""Every verb gives one clear line for a path that is not what it reads (issue #22 item 5, cli/common.py):
a directory, a text file, an empty file, a torch.save pickle, a TorchScript archive, a missing path,
and for ``migrate`` (which reads TorchScript archives) a tracejit program. Each: exit status 1 and one
``tracejit: error:`` line on stderr naming the path and what it is, nothing on stdout, no traceback
(``export`` exits with 2, its usage-error status, for a file it cannot read)."""
from __future__ import annotations

import pytest
import torch

import tracejit
from tracejit import cli

CASES = ("directory", "text", "empty", "pickle", "torchscript", "missing", "tracejit")


def _make(kind: str, tmp_path) -> str:
    path = tmp_path / {"directory": "dir", "text": "notes.txt", "empty": "empty.tjit", "pickle": "weights.pt",
                       "torchscript": "old.pt", "missing": "missing.tjit", "tracejit": "prog.tjit"}[kind]
    if kind == "directory":
        path.mkdir()
    elif kind == "text":
        path.write_text("hello world\nthis is a text file\n" * 20)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "pickle":
        torch.save({"weight": torch.ones(3)}, path)
    elif kind == "torchscript":
        torch.jit.save(torch.jit.trace(torch.nn.Linear(4, 2), torch.randn(1, 4)), str(path))
    elif kind == "tracejit":
        tracejit.save(tracejit.trace(torch.nn.Linear(4, 2), (torch.randn(1, 4),)), path)
    return str(path)


PROGRAM_PHRASES = {
    "directory": "is a directory, not a tracejit program",
    "text": "not a tracejit program (a tracejit file is a safetensors file; this one starts with b'hello world",
    "empty": "the file is empty, not a tracejit program",
    "pickle": "this is a torch.save file, not a tracejit program",
    "torchscript": "this is a TorchScript archive, not a tracejit program",
    "missing": "no such file",
}
ARCHIVE_PHRASES = {
    "directory": "is a directory, not a TorchScript archive",
    "text": "not a TorchScript archive (a zip file saved by torch.jit.save); this one starts with b'hello world",
    "empty": "the file is empty, not a TorchScript archive",
    "pickle": "this is a torch.save file, not a TorchScript archive",
    "tracejit": "this is a tracejit program already, nothing to migrate",
    "missing": "no such file",
}
MODEL_PHRASES = {
    "directory": "no config.json in this directory: not a model saved with save_pretrained",
    "missing": "no such directory",
    **{k: "is a file, not a directory saved with save_pretrained" for k in ("text", "empty", "pickle", "torchscript",
                                                                             "tracejit")},
}


def _argv(verb: str, path: str, tmp_path) -> list[str]:
    out = str(tmp_path / "out")
    return {"inspect": ["inspect", path], "run": ["run", path], "view": ["view", path, "-o", out + ".html"],
            "export": ["export", path, "-o", out + ".onnx"],
            "migrate": ["migrate", path, "-o", out + ".tjit", "--input", "float32[1,4]"],
            "trace": ["trace", "--hf", path, "-o", out + ".tjit"]}[verb]


def _params():
    for verb in ("inspect", "run", "view", "export"):
        for kind, phrase in PROGRAM_PHRASES.items():
            yield pytest.param(verb, kind, phrase, id=f"{verb}-{kind}")
    for kind, phrase in ARCHIVE_PHRASES.items():
        yield pytest.param("migrate", kind, phrase, id=f"migrate-{kind}")
    for kind, phrase in MODEL_PHRASES.items():
        yield pytest.param("trace", kind, phrase, id=f"trace-hf-{kind}")


@pytest.mark.parametrize("verb,kind,phrase", list(_params()))
def test_one_clear_line(verb, kind, phrase, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = _make(kind, tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(_argv(verb, path, tmp_path))
    out = capsys.readouterr()
    assert exit_info.value.code == (2 if verb == "export" else 1), out.err   # export: a usage error (2)
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tracejit: error: {'--hf ' if verb == 'trace' else ''}{path}: ")
    assert phrase in lines[0], lines[0]
    assert "miniz" not in lines[0] and "header claims" not in lines[0]


def test_migrate_still_converts_an_archive(tmp_path, capsys):
    path = _make("torchscript", tmp_path)
    assert cli.main(_argv("migrate", path, tmp_path)) == 0
    assert "migrated Linear" in capsys.readouterr().out
