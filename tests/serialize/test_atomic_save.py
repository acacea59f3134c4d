"""tracejit.save to a path is atomic: a save that fails halfway leaves an existing file exactly as
it was and no temporary file behind; a save that succeeds replaces the file. Saving something that
is not a traced program is a TypeError; a program that holds something that cannot be saved as
data is a SaveError naming it (and touches no file either).
"""
import io
import os
import warnings

import pytest
import torch
from torch import nn

import tracejit
import tracejit.serialize.archive as archive
from serialize_testlib import assert_same, load_bytes, to_bytes


@pytest.fixture(scope="module")
def two_programs():
    torch.manual_seed(21)
    a = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 4))
    b = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    return (a, tracejit.trace(a, torch.randn(2, 4))), (b, tracejit.trace(b, torch.randn(2, 4)))


def break_write_all(monkeypatch, exc=OSError("No space left on device")):
    """Make the low-level writer write part of what it is given, then fail."""
    calls = []

    def broken(out, data):
        mv = memoryview(data).cast("B")
        calls.append(len(mv))
        out.write(mv[: max(1, len(mv) // 2)])
        raise exc
    monkeypatch.setattr(archive, "_write_all", broken)
    return calls


def listing(directory):
    return sorted(os.listdir(directory))


@pytest.mark.parametrize("exc", [OSError("No space left on device"), KeyboardInterrupt(), RuntimeError("boom")])
def test_failed_save_leaves_existing_file_untouched(two_programs, tmp_path, monkeypatch, exc):
    (a, traced_a), (_, traced_b) = two_programs
    path = tmp_path / "model.tj"
    tracejit.save(traced_a, path)
    before = path.read_bytes()
    calls = break_write_all(monkeypatch, exc)
    with pytest.raises(type(exc)):
        tracejit.save(traced_b, path)
    assert calls, "the save did not go through _write_all"
    assert path.read_bytes() == before
    assert listing(tmp_path) == ["model.tj"]          # no temporary file left behind
    monkeypatch.undo()
    x = torch.randn(5, 4)
    with torch.no_grad():
        assert_same(tracejit.load(path)(x), a(x))


def test_failed_save_to_new_path_creates_nothing(two_programs, tmp_path, monkeypatch):
    (_, traced_a), _ = two_programs
    break_write_all(monkeypatch)
    with pytest.raises(OSError):
        tracejit.save(traced_a, tmp_path / "new.tj")
    assert listing(tmp_path) == []


def test_failed_rename_leaves_existing_file_untouched(two_programs, tmp_path, monkeypatch):
    (_, traced_a), (_, traced_b) = two_programs
    path = tmp_path / "model.tj"
    tracejit.save(traced_a, path)
    before = path.read_bytes()

    def no_replace(src, dst, *a, **kw):
        raise PermissionError("rename refused")
    monkeypatch.setattr(os, "replace", no_replace)
    with pytest.raises(PermissionError):
        tracejit.save(traced_b, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert listing(tmp_path) == ["model.tj"]


def test_successful_save_replaces_the_file(two_programs, tmp_path):
    (a, traced_a), (b, traced_b) = two_programs
    path = tmp_path / "model.tj"
    tracejit.save(traced_a, path)
    first = path.read_bytes()
    held = tracejit.load(path)                 # a program loaded (memory-mapped) from the old file
    tracejit.save(traced_b, path)
    assert path.read_bytes() == to_bytes(traced_b) != first
    assert listing(tmp_path) == ["model.tj"]
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert_same(tracejit.load(path)(x), b(x))
        assert_same(held(x), a(x))             # the program loaded before still has its own weights


def test_save_into_missing_directory_fails_cleanly(two_programs, tmp_path):
    (_, traced_a), _ = two_programs
    with pytest.raises(OSError):
        tracejit.save(traced_a, tmp_path / "no" / "such" / "dir.tj")
    assert listing(tmp_path) == []


@pytest.mark.parametrize("obj", [nn.Linear(2, 2), lambda x: x, torch.ones(2), None, {"forward": 1}, "model"],
                         ids=["module", "lambda", "tensor", "none", "dict", "str"])
def test_saving_a_non_traced_object_is_a_type_error(obj, tmp_path):
    with pytest.raises(TypeError, match="TracedFunction or TracedModule"):
        tracejit.save(obj, tmp_path / "x.tj")
    with pytest.raises(TypeError):
        tracejit.save(obj, io.BytesIO())
    assert listing(tmp_path) == []


def test_saving_to_something_that_is_not_a_file_is_a_type_error(two_programs):
    (_, traced_a), _ = two_programs
    with pytest.raises(TypeError):
        tracejit.save(traced_a, 42)


def _bool_index_trace():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(lambda x: x[True] * 2, torch.randn(3), check_trace=False)


def test_unsaveable_node_is_a_save_error_naming_it(tmp_path):
    traced = _bool_index_trace()
    assert "tracejit::getitem" in str(traced.graph)
    path = tmp_path / "f.tj"
    path.write_bytes(b"old contents")
    with pytest.raises(tracejit.SaveError) as info:
        tracejit.save(traced, path)
    msg = str(info.value)
    assert "tracejit::getitem" in msg and "forward" in msg
    assert os.path.basename(__file__) in msg             # where the node came from
    assert path.read_bytes() == b"old contents"
    assert listing(tmp_path) == ["f.tj"]
    buf = io.BytesIO()
    with pytest.raises(tracejit.SaveError):
        tracejit.save(traced, buf)


def test_unsaveable_node_in_submodule_names_the_module():
    class Picker(nn.Module):
        def forward(self, x):
            return x[True] + 1

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.pick = Picker()

        def forward(self, x):
            return self.pick(self.lin(x))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(Outer(), torch.randn(2, 3), check_trace=False)
    with pytest.raises(tracejit.SaveError, match="pick") as info:
        to_bytes(traced)
    assert "tracejit::getitem" in str(info.value)


def test_plain_submodule_is_a_save_error_naming_it():
    torch.manual_seed(2)
    traced = tracejit.trace(nn.Sequential(nn.Linear(2, 2)), torch.randn(1, 2))
    traced.add_module("extra", nn.Linear(2, 2))
    with pytest.raises(tracejit.SaveError, match="extra"):
        to_bytes(traced)


def test_meta_tensors_cannot_be_saved(two_programs, tmp_path):
    (_, traced_a), _ = two_programs
    meta = load_bytes(to_bytes(traced_a), map_location="meta")
    with pytest.raises(tracejit.SaveError, match="meta"):
        tracejit.save(meta, tmp_path / "m.tj")
    assert listing(tmp_path) == []


def test_save_flushes_to_disk_before_the_file_takes_its_name_unless_told_not_to(tmp_path, monkeypatch):
    traced = tracejit.trace(lambda x: x + 1, torch.randn(3))
    other = tracejit.trace(lambda x: x * 3, torch.randn(3))
    seen = []
    real_fsync = os.fsync

    def fsync(fd):
        seen.append({p.name: p.read_bytes() if p.exists() else None for p in tmp_path.iterdir()})
        return real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    tracejit.save(traced, tmp_path / "plain.tjit", durable=False)
    assert seen == []
    tracejit.save(traced, tmp_path / "durable.tjit")
    assert "durable.tjit" not in seen[0]               # the data is on disk before the file has its name
    old = (tmp_path / "durable.tjit").read_bytes()
    seen.clear()
    tracejit.save(other, tmp_path / "durable.tjit")
    assert seen[0]["durable.tjit"] == old              # ... also when it replaces a file
    assert (tmp_path / "durable.tjit").read_bytes() == to_bytes(other) != old
