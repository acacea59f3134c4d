"""The code cache (tracejit/serialize/code_cache.py, issue #22 item 4): a second load of a file, in this
process or a new one, makes its methods from the entry the first wrote, without checking, generating or
compiling them, and behaves as the first: values on new inputs, guards and their messages, input errors,
tracebacks, specializations, functions. An entry that is damaged, stale, not ours or not for this process's
decoding is not used; a file that fails its checks writes none; threads loading at once agree."""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap
import threading
import types

import pytest
import torch

import tracejit
from tracejit.serialize import cached_methods, code_cache, compile_once, validate


class Guarded(torch.nn.Module):
    """A training guard (dropout), a size guard (the branch), a dict output, a size read (the slice)."""

    def __init__(self):
        super().__init__()
        self.a, self.drop = torch.nn.Linear(8, 8), torch.nn.Dropout(0.1)

    def forward(self, x, mask):
        h = self.drop(self.a(x)) * mask
        if x.shape[0] > 1:
            h = h.softmax(-1)
        return {"y": h[:, : x.shape[0] + 1]}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    where = tmp_path / "code-cache"
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(where))
    return where


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = Guarded().eval()
    path = tmp_path_factory.mktemp("cache") / "guarded.tjit"
    with pytest.warns(tracejit.TracerWarning):
        tracejit.save(tracejit.trace(model, (torch.randn(2, 8), torch.ones(2, 8)), strict=False), path)
    return model, path


@pytest.fixture
def compiled(monkeypatch):
    """The names the loader compiles (none on a hit)."""
    calls = []
    real = cached_methods.compile_method
    for where in (compile_once, cached_methods):   # without a usable cache the loader compiles without recording
        monkeypatch.setattr(where, "compile_method", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    return calls


def _entries(where) -> list:
    return sorted(p for p in os.listdir(where) if p.endswith(".tjc")) if os.path.isdir(where) else []


def test_a_second_load_is_made_from_the_cache_and_behaves_as_the_first(saved, cache, compiled):
    model, path = saved
    first = tracejit.load(path)
    assert compiled and len(_entries(cache)) == 1
    n = len(compiled)
    second = tracejit.load(path)
    assert len(compiled) == n, "a hit compiles nothing"
    for batch in (3, 5):   # other batch sizes than the trace's 2: the slice follows the size
        x, mask = torch.randn(batch, 8), (torch.rand(batch, 8) > 0.3).float()
        want = model(x, mask)["y"].detach()
        assert want.shape == (batch, batch + 1)
        torch.testing.assert_close(second(x, mask)["y"], want)
        torch.testing.assert_close(first(x, mask)["y"], want)
    errors = []
    for program in (first, second):
        with pytest.raises(tracejit.GuardError) as guard:   # batch 1 takes the other branch
            program(torch.randn(1, 8), torch.ones(1, 8))
        with pytest.raises(TypeError) as wrong:
            program(torch.randn(3, 8), "not a mask")
        program.train()
        with pytest.raises(tracejit.GuardError) as training:
            program(torch.randn(3, 8), torch.ones(3, 8))
        program.eval()
        errors.append([str(guard.value), str(wrong.value), str(training.value)])
    assert errors[0] == errors[1] and "test_code_cache.py" in errors[1][0]
    assert second.code == first.code and second._traced_methods["forward"].signature == \
        first._traced_methods["forward"].signature


def test_an_error_inside_a_program_from_the_cache_shows_the_generated_and_the_traced_line(cache, tmp_path):
    def f(x, w):
        return (x @ w).relu()
    path = tmp_path / "f.tjit"
    tracejit.save(tracejit.trace(f, (torch.randn(2, 3), torch.randn(3, 4))), path)
    notes = []
    for _ in range(2):   # the first load writes the entry, the second is made from it
        program = tracejit.load(path)
        with pytest.raises(RuntimeError) as e:
            program(torch.randn(2, 5), torch.randn(3, 4))   # inner dimensions differ
        notes.append("\n".join(getattr(e.value, "__notes__", [])))
    assert len(_entries(cache)) == 1
    for note in notes:
        assert "matmul" in note and "traced from" in note and "test_code_cache.py" in note
    assert notes[0].split("<tracejit:")[0] == notes[1].split("<tracejit:")[0]


def test_functions_and_specializations_come_from_the_cache(cache, tmp_path, compiled):
    def f(x):
        return x * 2 if x.shape[0] > 2 else x - 1
    path = tmp_path / "spec.tjit"
    with pytest.warns(tracejit.TracerWarning):
        traced = tracejit.trace(f, torch.ones(4), specialize_for=[(torch.ones(2),)])
    tracejit.save(traced, path)
    tracejit.load(path)
    n = len(compiled)
    assert n == 2   # the first trace and its specialization
    program = tracejit.load(path)
    assert len(compiled) == n
    for size in (1, 2, 3, 7):
        x = torch.randn(size)
        torch.testing.assert_close(program(x), f(x))
    assert len(program.specializations) == 2


def test_a_new_process_loads_from_the_cache_without_the_code_generator_or_the_validator(saved, cache):
    model, path = saved
    code = """
        import json, sys, torch
        import tracejit
        program = tracejit.load(sys.argv[1])
        out = program(torch.arange(32.0).reshape(4, 8) / 10, torch.ones(4, 8))["y"]
        mods = [m for m in ("tracejit.codegen.python", "tracejit.serialize.validate", "tracejit.ops.aten")
                if m in sys.modules]
        print(json.dumps([out.tolist(), mods]))
    """
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(path)], capture_output=True,
                              text=True, timeout=300, env=dict(os.environ, PYTHONPATH=os.getcwd()))
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    (out1, mods1), (out2, mods2) = runs
    assert mods1 == ["tracejit.codegen.python", "tracejit.serialize.validate", "tracejit.ops.aten"]   # a miss
    assert mods2 == []   # the hit: nothing checked nor generated
    want = model(torch.arange(32.0).reshape(4, 8) / 10, torch.ones(4, 8))["y"].detach()
    torch.testing.assert_close(torch.tensor(out2), want)
    assert out1 == out2


def test_a_cache_others_may_write_is_neither_read_nor_written(saved, cache, compiled, monkeypatch):
    _, path = saved
    os.makedirs(cache, mode=0o700)
    os.chmod(cache, 0o777)
    recorded = []
    real_record = cached_methods._record
    monkeypatch.setattr(cached_methods, "_record", lambda *a: recorded.append(a) or real_record(*a))
    tracejit.load(path)
    assert _entries(cache) == [] and recorded == []   # not even recorded: it could not be kept
    n = len(compiled)   # one load's compilations
    os.chmod(cache, 0o700)
    tracejit.load(path)
    (entry,) = _entries(cache)
    tracejit.load(path)
    assert len(compiled) == 2 * n   # a hit
    os.chmod(cache / entry, 0o666)   # an entry someone else may have written
    tracejit.load(path)
    assert len(compiled) == 3 * n
    os.chmod(cache, 0o777)   # the entry is fine again, the directory is not
    os.chmod(cache / entry, 0o600)
    tracejit.load(path)
    assert len(compiled) == 4 * n


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "another key", "empty"])
def test_a_damaged_entry_is_ignored_and_written_again(saved, cache, compiled, damage):
    model, path = saved
    tracejit.load(path)
    (entry,) = _entries(cache)
    raw = (cache / entry).read_bytes()
    if damage == "flipped byte":
        raw = raw[:-10] + bytes([raw[-10] ^ 0x40]) + raw[-9:]
    elif damage == "truncated":
        raw = raw[: len(raw) // 2]
    elif damage == "empty":
        raw = b""
    if damage == "another key":   # a good entry copied under a name it was not written for
        (cache / ("0" * 64 + ".tjc")).write_bytes(raw)
        os.chmod(cache / ("0" * 64 + ".tjc"), 0o600)
        assert code_cache.read(str(cache), entry[:-4]) is not None
        assert code_cache.read(str(cache), "0" * 64) is None   # its stored key is not the name's
    else:
        (cache / entry).write_bytes(raw)
    n = len(compiled)
    program = tracejit.load(path)
    x = torch.randn(3, 8)
    torch.testing.assert_close(program(x, torch.ones(3, 8))["y"], model(x, torch.ones(3, 8))["y"].detach())
    if damage != "another key":
        assert len(compiled) == 2 * n   # compiled again, and the entry rewritten
        tracejit.load(path)
        assert len(compiled) == 2 * n


def test_an_entry_is_stale_once_a_module_that_made_it_changed(saved, cache, compiled, tmp_path, monkeypatch):
    _, path = saved
    source = tmp_path / "probe.py"
    source.write_text("x = 1\n")
    probe = types.ModuleType("tracejit._probe_for_the_cache_test")
    probe.__file__ = str(source)
    monkeypatch.setitem(sys.modules, probe.__name__, probe)   # one of "tracejit's modules" when the entry is written
    tracejit.load(path)
    n = len(compiled)
    tracejit.load(path)
    assert len(compiled) == n   # unchanged: a hit
    source.write_text("x = 22\n")   # edited: the entry is stale
    tracejit.load(path)
    assert len(compiled) == 2 * n


def test_a_file_that_fails_its_checks_writes_no_entry(saved, cache, monkeypatch):
    _, path = saved

    def refuse(*args, **kwargs):
        raise tracejit.LoadError("refused by the test")
    monkeypatch.setattr(validate, "check_graph", refuse)
    with pytest.raises(tracejit.LoadError, match="refused by the test"):
        tracejit.load(path)
    assert _entries(cache) == []


def test_an_entry_this_process_decodes_otherwise_falls_back_to_compiling(saved, cache, compiled, monkeypatch):
    """Another output class, a custom op registered otherwise (cached_methods._assumed): the entry does not
    answer; the load compiles as on a miss and is right."""
    model, path = saved
    tracejit.load(path)
    n = len(compiled)
    real = cached_methods._assumed
    monkeypatch.setattr(cached_methods, "_assumed", lambda g, specs: ("decoded otherwise",) + real(g, specs))
    program = tracejit.load(path)
    assert len(compiled) == 2 * n
    x = torch.randn(4, 8)
    torch.testing.assert_close(program(x, torch.ones(4, 8))["y"], model(x, torch.ones(4, 8))["y"].detach())


@pytest.mark.parametrize("edit", ["a recipe naming a constant the graph lacks", "one function less",
                                  "one function more", "another label"])
def test_an_entry_that_does_not_answer_the_load_falls_back_to_compiling(saved, cache, compiled, monkeypatch, edit):
    """Whatever an entry holds, a good file loads: an entry that does not answer the load's compile calls in
    order, or whose recipes do not fit the graphs, is a miss (serialize/loader.py)."""
    model, path = saved
    tracejit.load(path)
    n = len(compiled)
    real = code_cache.read

    def edited(where, k):
        entries = list(real(where, k))
        first = list(entries[0])
        if edit.startswith("a recipe"):
            first[6] = first[6] + (("_tj_k99", ("constant", 99)),)
        elif edit == "another label":
            first[0] = (first[0][0], "elsewhere") + first[0][2:]
        entries[0] = tuple(first)
        if edit == "one function less":
            entries.pop()
        elif edit == "one function more":
            entries.append(entries[-1])
        return entries
    monkeypatch.setattr(code_cache, "read", edited)
    program = tracejit.load(path)
    assert len(compiled) == 2 * n
    x = torch.randn(4, 8)
    torch.testing.assert_close(program(x, torch.ones(4, 8))["y"], model(x, torch.ones(4, 8))["y"].detach())


def test_other_map_locations_are_other_entries_and_off_means_no_directory(saved, cache, tmp_path, monkeypatch):
    _, path = saved
    tracejit.load(path)
    tracejit.load(path, map_location="cpu")
    assert len(_entries(cache)) == 2
    off = tmp_path / "never"
    for value in ("", "0"):
        monkeypatch.setenv("TRACEJIT_CACHE_DIR", value)
        assert code_cache.directory() is None
        tracejit.load(path)
    assert not off.exists()


def test_eight_threads_loading_at_once_agree_and_write_one_entry(saved, cache):
    model, path = saved
    x, mask = torch.randn(6, 8), torch.ones(6, 8)
    want = model(x, mask)["y"].detach()
    for _ in range(2):   # first all miss (an empty cache), then all hit
        barrier, got = threading.Barrier(8), {}

        def run(i):
            barrier.wait()
            try:
                got[i] = tracejit.load(path)(x, mask)["y"]
            except Exception as e:   # noqa: BLE001  (reported below)
                got[i] = e
        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(8):
            assert isinstance(got[i], torch.Tensor), got[i]
            torch.testing.assert_close(got[i], want)
        assert len(_entries(cache)) == 1
        assert not [p for p in os.listdir(cache) if p.endswith(".tmp")]


def test_where_the_cache_lives(monkeypatch, tmp_path):
    monkeypatch.delenv("TRACEJIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert code_cache.directory() == str(tmp_path / "xdg" / "tracejit")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert code_cache.directory() == str(tmp_path / "home" / ".cache" / "tracejit")
    monkeypatch.setattr(code_cache.os.path, "expanduser", lambda p: p)   # no home directory to be found
    assert code_cache.directory() is None
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "relative/dir")
    assert code_cache.directory() == os.path.abspath("relative/dir")


class Backbone(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)

    def forward(self, x):
        h = self.a(x)
        return collections.OrderedDict([("feat", h), ("pooled", self.b(h).mean(-1))])


Pair = collections.namedtuple("Pair", "first second")


class Neck(torch.nn.Module):
    def forward(self, features):
        return features["feat"].sum(-1) + features["pooled"]


class Containers(torch.nn.Module):
    """A submodule's OrderedDict out and another's in (torchvision's detection backbone and FPN), a namedtuple and
    a dict out."""

    def __init__(self):
        super().__init__()
        self.backbone, self.neck = Backbone(), Neck()

    def forward(self, x):
        out = self.backbone(x)
        mixed = self.neck(collections.OrderedDict([("feat", out["feat"] * 2), ("pooled", out["pooled"])]))
        return Pair(out["feat"] * 2, {"pooled": mixed})


def test_container_outputs_are_made_from_the_cache_too(cache, tmp_path, compiled):
    torch.manual_seed(0)
    model = Containers().eval()
    path = tmp_path / "containers.tjit"
    tracejit.save(tracejit.trace(model, torch.randn(3, 4), strict=False), path)
    first = tracejit.load(path)
    n = len(compiled)
    assert n and len(_entries(cache)) == 1
    second = tracejit.load(path)
    assert len(compiled) == n   # every global described: nothing compiled again
    x = torch.randn(5, 4)
    want = model(x)
    for program in (first, second):
        got = program(x)
        # a namedtuple no registry holds comes back as one of the same name and fields (docs/API.md)
        assert type(got).__name__ == "Pair" and got._fields == Pair._fields and isinstance(got.second, dict)
        torch.testing.assert_close(got.first, want.first.detach())
        torch.testing.assert_close(got.second["pooled"], want.second["pooled"].detach())
