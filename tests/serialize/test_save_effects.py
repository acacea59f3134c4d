"""tracejit.save has no side effects beyond the file it writes: nothing left after a kill at any
moment, torch.save's permissions, symbolic links written through, and every failure a SaveError
(an OSError of the matching kind) that says which step failed and where."""
from __future__ import annotations

import errno
import io
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import tempfile
import time

import pytest
import torch
from torch import nn

import tracejit
from tracejit.serialize import atomic_file
from serialize_testlib import to_bytes


@pytest.fixture(scope="module")
def programs():
    torch.manual_seed(8)
    a = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))   # ~2 MB of weights
    b = nn.Sequential(nn.Linear(256, 1024), nn.Tanh(), nn.Linear(1024, 256))
    ta, tb = tracejit.trace(a, torch.randn(2, 256)), tracejit.trace(b, torch.randn(2, 256))
    return ta, tb, to_bytes(ta), to_bytes(tb)


@pytest.fixture(params=["unnamed", "named"])
def temp_kind(request, monkeypatch):
    """Both ways of writing: an unnamed O_TMPFILE (where this system has it) and named temporaries."""
    if request.param == "named":
        monkeypatch.setattr(atomic_file, "_linker_for", lambda directory, name: None)
    return request.param


def _in_child(body) -> int:
    """Run ``body()`` in a forked child (torch already imported: no start-up cost); its exit status."""
    pid = os.fork()
    if pid == 0:   # pragma: no cover - the child
        code = 1
        try:
            code = body() or 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_kill_at_random_moments_leaves_old_or_new_file_and_nothing_else(programs, tmp_path, temp_kind):
    ta, tb, bytes_a, bytes_b = programs
    path = tmp_path / "model.tj"
    tracejit.save(ta, path)
    rng = random.Random(4)
    leftovers_seen = 0
    for round_ in range(12):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:   # pragma: no cover - the child saves in a loop until killed
            os.close(read_fd)
            os.write(write_fd, b"go")
            try:
                while True:
                    tracejit.save(tb, path)
                    tracejit.save(ta, path)
            finally:
                os._exit(3)
        os.close(write_fd)
        assert os.read(read_fd, 2) == b"go"
        os.close(read_fd)
        time.sleep(rng.uniform(0.0, 0.06))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), f"round {round_}: the child ended on its own"
        names = sorted(os.listdir(tmp_path))
        assert "model.tj" in names
        assert path.read_bytes() in (bytes_a, bytes_b), f"round {round_}: a torn file"
        stale = [n for n in names if n != "model.tj"]
        assert all(atomic_file._TEMP.match(n) for n in stale), stale   # only our own temporaries
        leftovers_seen += bool(stale)
        tracejit.save(ta, path)                    # the next save removes a killed save's temporary
        assert sorted(os.listdir(tmp_path)) == ["model.tj"], f"round {round_}"
    if temp_kind == "named":
        assert leftovers_seen >= 1   # kills did land mid-save (a named temporary shows it; ~9 of 12 here)
    elif atomic_file._linker_for(str(tmp_path), "model.tj") is not None:
        assert leftovers_seen <= 2   # only a kill between link and rename can leave a name (0 of 12 here)
    x = torch.randn(3, 256)
    torch.testing.assert_close(tracejit.load(path)(x), ta(x))


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_file_mode_is_that_of_torch_save(programs, tmp_path, umask, mode, temp_kind):
    ta, *_ = programs
    old = os.umask(umask)
    try:
        tracejit.save(ta, tmp_path / "m.tj")
        torch.save({"w": torch.ones(1)}, tmp_path / "ref.pt")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "m.tj").st_mode) == mode
    assert stat.S_IMODE(os.stat(tmp_path / "ref.pt").st_mode) == mode


def test_existing_file_keeps_its_permissions(programs, tmp_path, temp_kind):
    ta, tb, _, bytes_b = programs
    path = tmp_path / "m.tj"
    tracejit.save(ta, path)
    os.chmod(path, 0o640)
    tracejit.save(tb, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert path.read_bytes() == bytes_b


def test_symlink_is_written_through(programs, tmp_path, temp_kind):
    ta, tb, bytes_a, bytes_b = programs
    real_dir = tmp_path / "store"
    real_dir.mkdir()
    (real_dir / "model.tj").write_bytes(b"old")
    link = tmp_path / "current.tj"
    link.symlink_to(os.path.join("store", "model.tj"))    # a relative link, as users make them
    tracejit.save(ta, link)
    assert link.is_symlink() and os.readlink(link) == os.path.join("store", "model.tj")
    assert (real_dir / "model.tj").read_bytes() == bytes_a
    dangling = tmp_path / "next.tj"
    dangling.symlink_to(real_dir / "new.tj")
    tracejit.save(tb, dangling)                            # like open(..., "wb"): creates the target
    assert dangling.is_symlink() and (real_dir / "new.tj").read_bytes() == bytes_b
    assert sorted(os.listdir(real_dir)) == ["model.tj", "new.tj"]
    assert sorted(os.listdir(tmp_path)) == ["current.tj", "next.tj", "store"]


def _assert_save_error(e, kind, path, step):
    assert isinstance(e, tracejit.SaveError) and isinstance(e, kind), type(e).__mro__
    assert str(path) in str(e) and step in str(e), str(e)


def test_file_size_limit_is_a_save_error_and_changes_nothing(programs, tmp_path, temp_kind):
    """A full disk, as RLIMIT_FSIZE makes it for one process (no root or tmpfs needed)."""
    ta, tb, bytes_a, _ = programs
    path = tmp_path / "model.tj"
    tracejit.save(ta, path)

    def body():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # get EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))
        for target in (path, tmp_path / "new.tj"):
            try:
                tracejit.save(tb, target)
            except tracejit.SaveError as e:
                _assert_save_error(e, OSError, target, "write the data")
                assert e.errno == errno.EFBIG and e.filename == str(target)
            else:
                return 10
        return 0

    assert _in_child(body) == 0
    assert path.read_bytes() == bytes_a
    assert sorted(os.listdir(tmp_path)) == ["model.tj"]


def _read_only_dir_child(directory, path, program):
    def body():
        if os.geteuid() == 0:   # root ignores permissions: drop to an unprivileged user
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        for target in (path, os.path.join(directory, "new.tj")):
            try:
                tracejit.save(program, target)
            except tracejit.SaveError as e:
                if not isinstance(e, PermissionError) or target not in str(e) and directory not in str(e):
                    return 11
            else:
                return 10
        return 0
    return body


def test_read_only_directory_is_a_permission_save_error(programs):
    ta, tb, bytes_a, _ = programs
    directory = tempfile.mkdtemp(prefix="tracejit-ro-")   # under /tmp, reachable by an unprivileged user
    try:
        path = os.path.join(directory, "model.tj")
        tracejit.save(ta, path)
        os.chmod(path, 0o644)
        os.chmod(directory, 0o555)
        if os.geteuid() != 0 and os.access(directory, os.W_OK):
            pytest.skip("this user can write to a 0555 directory (a capability overrides permissions)")
        code = _in_child(_read_only_dir_child(directory, path, tb))
        assert code == 0, {10: "save succeeded in a read-only directory", 11: "not a PermissionError SaveError "
                                                                              "naming the path"}.get(code, code)
        with open(path, "rb") as fh:
            assert fh.read() == bytes_a
        assert os.listdir(directory) == ["model.tj"]
    finally:
        os.chmod(directory, 0o755)
        shutil.rmtree(directory)


def test_read_only_file_system_is_a_save_error(programs, tmp_path):
    ta, *_ = programs
    mount_point = tmp_path / "ro"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a read-only tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {done.stderr.strip()}")
    try:
        with pytest.raises(tracejit.SaveError) as info:
            tracejit.save(ta, mount_point / "m.tj")
        _assert_save_error(info.value, OSError, mount_point, "create a file in the directory")
        assert info.value.errno == errno.EROFS
        assert os.listdir(mount_point) == []
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_missing_directory_and_directory_target_are_save_errors(programs, tmp_path, temp_kind):
    ta, *_ = programs
    missing = tmp_path / "no" / "such" / "m.tj"
    with pytest.raises(FileNotFoundError) as info:     # the handlers written for open() still catch it
        tracejit.save(ta, missing)
    _assert_save_error(info.value, FileNotFoundError, missing.parent, "create a file in the directory")
    (tmp_path / "adir").mkdir()
    with pytest.raises(IsADirectoryError) as info:
        tracejit.save(ta, tmp_path / "adir")
    _assert_save_error(info.value, IsADirectoryError, tmp_path / "adir", "rename the written file over")
    assert sorted(os.listdir(tmp_path)) == ["adir"] and os.listdir(tmp_path / "adir") == []


def test_stale_temporaries_of_live_processes_and_other_names_are_kept(programs, tmp_path):
    ta, *_ = programs
    mine_dead = tmp_path / f".m.tj.tracejit-{_dead_pid()}-0123456789ab.tmp"
    live = tmp_path / f".m.tj.tracejit-{os.getppid()}-0123456789ab.tmp"      # a save in progress elsewhere
    other_name = tmp_path / f".x.tj.tracejit-{_dead_pid()}-0123456789ab.tmp"
    unrelated = tmp_path / ".m.tj.tmp"
    for p in (mine_dead, live, other_name, unrelated):
        p.write_bytes(b"partial")
    tracejit.save(ta, tmp_path / "m.tj")
    assert sorted(os.listdir(tmp_path)) == sorted(["m.tj", live.name, other_name.name, unrelated.name])


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_file_object_write_failure_is_a_save_error(programs):
    ta, *_ = programs

    class Full:
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(tracejit.SaveError) as info:
        tracejit.save(ta, Full())
    assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
    assert "file object" in str(info.value)


def test_save_error_is_still_caught_as_before():
    """Code written for the old SaveError(Exception) keeps working, and OSError handlers catch it too."""
    e = tracejit.SaveError("a constant of type object cannot be saved as data")
    assert isinstance(e, Exception) and isinstance(e, OSError)
    assert str(e) == "a constant of type object cannot be saved as data"
    paired = atomic_file._failure(PermissionError(errno.EACCES, "Permission denied"), "create a file", "/x")
    assert isinstance(paired, tracejit.SaveError) and isinstance(paired, PermissionError)
    import pickle
    again = pickle.loads(pickle.dumps(paired))
    assert type(again) is type(paired) and again.errno == errno.EACCES


def test_concurrent_saves_to_one_path_leave_one_complete_file(programs, tmp_path, temp_kind):
    import threading
    ta, tb, bytes_a, bytes_b = programs
    path = tmp_path / "model.tj"
    errors = []

    def saver(program):
        def run():
            try:
                for _ in range(4):
                    tracejit.save(program, path)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
        return run

    threads = [threading.Thread(target=saver(p)) for p in (ta, tb, ta, tb)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert path.read_bytes() in (bytes_a, bytes_b)
    assert os.listdir(tmp_path) == ["model.tj"]


@pytest.mark.parametrize("backend", ["onnxruntime", "auto"])
def test_saving_a_backend_program_says_what_to_save_instead(backend):
    """``tracejit.save(optimize_for_inference(traced, backend=...))``: a TypeError that says to save the traced
    program and build the backend after loading (serve25b: the message named the types only)."""
    pytest.importorskip("onnxruntime")
    traced = tracejit.trace(torch.nn.Linear(3, 3).eval(), (torch.randn(2, 3),))
    options = {"candidates": ("traced", "onnxruntime"), "budget_s": 0.05} if backend == "auto" else {}
    program = tracejit.optimize_for_inference(traced, backend=backend, **options)
    with pytest.raises(TypeError, match=r"save the traced program it was built from .*AutoProgram.save"):
        tracejit.save(program, io.BytesIO())
