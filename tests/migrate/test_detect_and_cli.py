"""tracejit.load names TorchScript and torch.save files (and the way to migrate them); the
``tracejit migrate`` command converts an archive into a file ``tracejit.load`` reads."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.cli import main
from tracejit.migrate import is_torch_file


def _torchscript(tmp_path):
    path = tmp_path / "old.pt"
    model = nn.Sequential(nn.Linear(3, 5), nn.ReLU())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(model, torch.randn(2, 3)), str(path))
    return path, model


def test_load_of_a_torchscript_archive_says_migrate(tmp_path):
    path, _ = _torchscript(tmp_path)
    with pytest.raises(tracejit.LoadError, match=r"this is a TorchScript archive.*tracejit\.migrate\(.*"
                                                 r"`tracejit migrate"):
        tracejit.load(path)
    with pytest.raises(tracejit.LoadError, match="TorchScript archive"):
        tracejit.load(io.BytesIO(path.read_bytes()))


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_load_of_a_torch_save_file_says_what_it_is(tmp_path, zipped):
    path = tmp_path / "weights.pt"
    torch.save({"w": torch.ones(3)}, path, _use_new_zipfile_serialization=zipped)
    with pytest.raises(tracejit.LoadError, match=r"this is a torch\.save file.*tracejit\.migrate"):
        tracejit.load(path)


def test_detection_leaves_tracejit_files_and_other_zips_alone(tmp_path):
    buf = io.BytesIO()
    tracejit.save(tracejit.trace(lambda x: x * 3, torch.ones(2)), buf)
    assert is_torch_file(buf.getvalue()) is None
    import zipfile
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("readme.txt", "hi")
    assert is_torch_file(other.getvalue()) is None
    assert is_torch_file(b"PK\x03\x04 broken") is None
    with pytest.raises(tracejit.LoadError) as e:
        tracejit.load(io.BytesIO(other.getvalue()))
    assert "TorchScript" not in str(e.value)


def test_cli_migrate_writes_a_loadable_program(tmp_path, capsys, monkeypatch):
    path, model = _torchscript(tmp_path)
    out = tmp_path / "new.tjit"
    assert main(["migrate", str(path), "-o", str(out), "--input", "float32[2,3]"]) == 0
    assert "migrated Sequential" in capsys.readouterr().out

    def no_torchscript(*a, **k):
        raise AssertionError("the migrated file must load without TorchScript")
    monkeypatch.setattr(torch.jit, "load", no_torchscript)
    monkeypatch.setattr(torch.jit, "script", no_torchscript)
    x = torch.randn(7, 3)
    torch.testing.assert_close(tracejit.load(out)(x), model(x))


def test_cli_migrate_without_inputs_is_a_usage_error(tmp_path, capsys):
    path, _ = _torchscript(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["migrate", str(path), "-o", str(tmp_path / "n.tjit")])
    assert e.value.code == 2
    assert "--input" in capsys.readouterr().err


def test_cli_migrate_with_wrong_shapes_names_the_op(tmp_path, capsys):
    path, _ = _torchscript(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["migrate", str(path), "-o", str(tmp_path / "n.tjit"), "-i", "float32[2,4]"])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("tracejit: error:") and "aten::linear" in err and err.count("\n") == 1
