"""Writing a file so that it appears whole or not at all, with no side effects left behind.

``replacing(path)`` yields a binary file; when the block ends without an exception its content
becomes ``path`` in one step, otherwise nothing changes. What it guarantees:

- A kill at any moment leaves the old file (or none) intact and nothing else behind. On Linux the
  data goes into an unnamed file (``O_TMPFILE``), which the kernel frees if the process dies; it
  gets a name only when complete: linked as ``path`` directly when that does not exist, else linked
  as a temporary name and renamed over ``path`` (a rename cannot be done from an unnamed file).
  An unnamed file is linked with ``linkat(fd, "", AT_EMPTY_PATH)`` or through ``/proc/self/fd``,
  whichever this system allows (probed once per file system); where neither works, or without
  ``O_TMPFILE``, the data goes to a named temporary file. Temporary names
  are ``.<name>.tracejit-<pid>-<random>.tmp`` beside the target; a save removes the ones of its
  target whose process is gone (a kill in that short window).
- The mode is that of ``open(path, "wb")``, as ``torch.save`` gives: an existing file keeps its
  permission bits, a new one gets 0o666 minus the umask.
- A symbolic link is written through: its target is replaced, the link stays.
- Every OS failure is a ``SaveError`` (an ``OSError``) that says which step failed and where.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import secrets
import stat
import sys

from ..errors import SaveError

_TEMP = re.compile(r"^\.(?P<name>.+)\.tracejit-(?P<pid>\d+)-[0-9a-f]{12}\.tmp$")


def _temp_name(directory: str, name: str) -> str:
    return os.path.join(directory, f".{name}.tracejit-{os.getpid()}-{secrets.token_hex(6)}.tmp")


def _paired(kind: type) -> type:
    """SaveError together with one of Python's OSError subclasses, so ``except PermissionError`` still works."""
    pair = type(f"Save{kind.__name__}", (SaveError, kind), {"__module__": __name__, "__doc__": SaveError.__doc__})
    globals()[pair.__name__] = pair   # picklable by name
    return pair


_PAIRS = {kind: _paired(kind) for kind in (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
                                           NotADirectoryError, InterruptedError)}


def _failure(e: OSError, what: str, where: str) -> SaveError:
    """A SaveError saying which step failed and where, of the same OSError subclass as ``e``."""
    kind = type(e) if type(e) in _PAIRS else type(OSError(e.errno, "")) if e.errno is not None else OSError
    return _PAIRS.get(kind, SaveError)(e.errno, f"tracejit.save could not {what} ({e.strerror or e})", where)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:   # it exists but is not ours to signal
        return True
    return True


def remove_stale_temporaries(directory: str, name: str) -> list[str]:
    """Remove the temporary files of earlier saves to ``name`` whose process no longer runs."""
    removed = []
    try:
        entries = os.listdir(directory)
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP.match(entry)
        if m and m["name"] == name and not _alive(int(m["pid"])):
            try:
                os.unlink(os.path.join(directory, entry))
                removed.append(entry)
            except OSError:
                pass
    return removed


def _open_unnamed(directory: str):
    """An unnamed file in ``directory`` (O_TMPFILE), or None where the system or file system lacks it."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None:
        return None
    try:
        return os.open(directory, flag | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT) and os.path.isdir(directory):
            return None   # the file system does not support it (EISDIR/ENOENT: an old kernel)
        raise


_libc = None


def _link_empty_path(fd: int, destination: str) -> None:
    """linkat(fd, "", AT_FDCWD, destination, AT_EMPTY_PATH): allowed with CAP_DAC_READ_SEARCH, or for
    one's own O_TMPFILE files on recent kernels."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.linkat(fd, b"", -100, os.fsencode(destination), 0x1000) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), destination)


def _link_proc(fd: int, destination: str) -> None:
    os.link(f"/proc/self/fd/{fd}", destination, follow_symlinks=True)


_LINKERS: dict[int, object] = {}   # st_dev -> the way to name an unnamed file there, or None


def _linker_for(directory: str, name: str):
    """How to give an unnamed file a name in ``directory`` (None: use named temporary files)."""
    if not sys.platform.startswith("linux"):
        return None
    device = os.stat(directory).st_dev
    if device not in _LINKERS:
        found = None
        fd = _open_unnamed(directory)
        if fd is not None:
            try:
                for linker in (_link_empty_path, _link_proc):
                    probe = _temp_name(directory, name)
                    try:
                        linker(fd, probe)
                    except (OSError, AttributeError):
                        continue
                    os.unlink(probe)
                    found = linker
                    break
            finally:
                os.close(fd)
        _LINKERS[device] = found
    return _LINKERS[device]


@contextlib.contextmanager
def replacing(path: str, *, durable: bool = True):
    """Yield a binary file that becomes ``path`` (or a symlink's target) when the block succeeds.

    ``durable``: flush the data (and the directory entry) to the disk before and after it takes the
    name, so a power loss cannot leave a half-written file either.
    """
    target = os.path.realpath(path)   # write through symbolic links
    directory, name = os.path.split(target)
    remove_stale_temporaries(directory, name)
    try:
        existing_mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        existing_mode = None
    except OSError as e:
        raise _failure(e, "read the existing file's permissions", target) from e
    try:
        linker = _linker_for(directory, name)
        fd = _open_unnamed(directory) if linker is not None else None
        temp = None
        if fd is None:
            temp = _temp_name(directory, name)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as e:
        raise _failure(e, f"create a file in the directory {directory!r}", directory) from e
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                yield out
            except SaveError:
                raise
            except OSError as e:   # the writer's own failure (a full disk, a file size limit)
                raise _failure(e, f"write the data for {target!r}", target) from e
            _finish_data(out, existing_mode, durable, target)
            _give_name(out.fileno(), linker, temp, directory, name, target)
        if durable:
            _sync_directory(directory)
    except BaseException:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        raise


def _finish_data(out, existing_mode, durable: bool, target: str) -> None:
    try:
        out.flush()
        if existing_mode is not None and hasattr(os, "fchmod"):
            os.fchmod(out.fileno(), existing_mode)
        if durable:
            os.fsync(out.fileno())
    except OSError as e:
        raise _failure(e, f"write the data for {target!r}", target) from e


def _give_name(fd: int, linker, temp: str | None, directory: str, name: str, target: str) -> None:
    """Make the complete file ``target``: link the unnamed file, or rename the named temporary."""
    if temp is None:
        try:
            linker(fd, target)
            return
        except FileExistsError:
            pass
        except OSError as e:
            raise _failure(e, f"give the written file its name in {directory!r}", target) from e
        temp = _temp_name(directory, name)
        try:
            linker(fd, temp)
        except OSError as e:
            raise _failure(e, f"give the written file a temporary name in {directory!r}", temp) from e
    try:
        os.replace(temp, target)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise _failure(e, f"rename the written file over {target!r}", target) from e


def _sync_directory(directory: str) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return   # some systems cannot open a directory: the data itself is synced already
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
