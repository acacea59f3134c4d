"""The code cache: a loaded program's compiled methods kept on this machine, so the next process that loads
the same file skips checking, generating and compiling them (issue #22 item 4: a server's start).

What ``tracejit.load`` does with it (serialize/loader.py):

- the key is a SHA-256 of the file's whole header (the program document and every tensor's dtype, shape and
  place), the file's size (its call-time budget), ``map_location``, where this tracejit is installed and the
  versions of tracejit, Python and torch. The weights are not in the key: their CRC is checked at every load,
  as without the cache;
- an entry also records the size and modification time of each tracejit module the process that wrote it had
  imported (the code generator, the validator, ...): when one changed, the entry is not used (as Python's
  bytecode cache stamps a module's source);
- on a miss the file is loaded as always (decoded, validated, compiled); when it loads, each method's code
  object and the recipe of its globals (cached_methods.py) are written to ``<key>.tjc``;
- on a hit the document is decoded without the validator (it passed it, byte for byte, with this same
  tracejit) and the methods are made from the entry. Anything unexpected in an entry: it is ignored and the
  file is loaded as on a miss.

An entry holds code objects that the process runs: the cache is as trusted as Python's own ``__pycache__``.
It is used only where the directory and the entry belong to this user and nobody else may write them
(``_trusted``); tracejit writes entries only from programs it validated itself, never from a file's bytes.
A crafted *program file* cannot reach it: a file's key is a hash of its own header.

Where: ``$TRACEJIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tracejit``, else ``~/.cache/tracejit``. Set
``TRACEJIT_CACHE_DIR`` to an empty string (or ``0``) to turn it off. At most ``MAX_ENTRIES`` entries holding at
most ``MAX_TOTAL_BYTES`` in all are kept (the least recently written go first; the newest always stays): a
crafted file's entry can be twice its header (a 5 MB file of 28,000 nodes wrote 11.5 MB), so 256 entries of
distinct files a service was handed could fill gigabytes of its disk (round 25). Temporary files a process
killed while writing left behind go after an hour.

>>> import os, tempfile, torch, tracejit
>>> os.environ["TRACEJIT_CACHE_DIR"] = tempfile.mkdtemp()
>>> path = os.path.join(tempfile.mkdtemp(), "m.tjit")
>>> tracejit.save(tracejit.trace(torch.nn.Linear(2, 2), torch.ones(1, 2)), path)
>>> m1 = tracejit.load(path)   # compiles, writes the entry
>>> m2 = tracejit.load(path)   # made from the entry
>>> len(os.listdir(os.environ["TRACEJIT_CACHE_DIR"]))
1
>>> bool(torch.equal(m1(torch.ones(3, 2)), m2(torch.ones(3, 2))))
True
>>> del os.environ["TRACEJIT_CACHE_DIR"]
"""
from __future__ import annotations

import hashlib
import marshal
import os
import stat
import sys
import time

import torch

from ..version import __version__

MAGIC = b"TJCC1\n"
MAX_ENTRIES = 256
MAX_ENTRY_BYTES = 256 * 1024 * 1024
MAX_TOTAL_BYTES = 1024 * 1024 * 1024
STALE_TMP_NS = 3600 * 10 ** 9
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # another copy of tracejit: other keys


def directory() -> str | None:
    """The cache directory this process uses, or None when the cache is off."""
    if not hasattr(os, "getuid"):
        return None   # no owner to check (Windows): off
    chosen = os.environ.get("TRACEJIT_CACHE_DIR")
    if chosen is not None:
        return os.path.abspath(chosen) if chosen not in ("", "0") else None
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.path.expanduser("~")
        if not os.path.isabs(home):   # no home directory to find: off, never a "~" folder in the working directory
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(os.path.abspath(base), "tracejit")


def key(buf, header_len: int, map_location) -> str | None:
    """The cache key of the file in ``buf`` (its header is ``header_len`` bytes after the length field)."""
    if header_len > len(buf) - 8:
        return None
    h = hashlib.sha256(MAGIC)
    for part in (__version__, _PACKAGE, sys.version, torch.__version__, str(len(buf)), repr(map_location)):
        h.update(part.encode() + b"\0")
    h.update(memoryview(buf)[8:8 + header_len])
    return h.hexdigest()


def read(where: str | None, k: str | None):
    """The entries cached under key ``k``, or None (no entry, or one not to trust: see the module doc)."""
    if where is None or k is None:
        return None
    path = os.path.join(where, k + ".tjc")
    try:
        if not _trusted(os.stat(where)):
            return None
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _trusted(st) or st.st_size > MAX_ENTRY_BYTES:
                return None
            data = f.read(MAX_ENTRY_BYTES + 1)
        except OSError:
            return None
    head = len(MAGIC) + 32
    if not data.startswith(MAGIC) or hashlib.sha256(data[head:]).digest() != data[len(MAGIC):head]:
        return None   # a torn or damaged write
    try:
        stored_key, sources, entries = marshal.loads(data[head:])
    except (ValueError, EOFError, TypeError):
        return None
    return entries if stored_key == k and _unchanged(sources) else None


def writable(where: str | None) -> bool:
    """Can this process keep entries in ``where`` (made here if missing)? A miss records its methods only then: a
    read-only home, or a directory others may write, costs a load nothing."""
    if where is None:
        return False
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
        return _trusted(os.stat(where)) and os.access(where, os.W_OK)
    except OSError:
        return False


def write(where: str | None, k: str | None, entries: list) -> None:
    """Keep ``entries`` under ``k``; a cache that cannot be written is skipped silently (it only saves time)."""
    if where is None or k is None:
        return
    try:
        payload = marshal.dumps((k, _sources(), entries))
        if len(payload) > MAX_ENTRY_BYTES:
            return
        if not _trusted(os.stat(where)):   # made by ``writable``; checked again as it is written
            return
        tmp = os.path.join(where, f".{k}.{os.getpid()}.{id(entries)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, os.path.join(where, k + ".tjc"))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _evict(where)
    except (OSError, ValueError):
        return


def _trusted(st) -> bool:
    """Owned by this user, writable by nobody else."""
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _evict(where: str) -> None:
    """Keep the newest entries, at most MAX_ENTRIES of them and MAX_TOTAL_BYTES in all (the newest always);
    remove temporary files older than STALE_TMP_NS (a writer killed before its rename)."""
    entries, now = [], None
    with os.scandir(where) as it:
        for e in it:
            st = e.stat(follow_symlinks=False)
            if e.name.endswith(".tjc"):
                entries.append((st.st_mtime_ns, st.st_size, e.path))
            elif e.name.startswith(".") and e.name.endswith(".tmp") and stat.S_ISREG(st.st_mode):
                now = now or time.time_ns()
                if now - st.st_mtime_ns > STALE_TMP_NS:
                    _unlink(e.path)
    entries.sort(reverse=True)   # newest first
    total = 0
    for i, (_, size, path) in enumerate(entries):
        total += size
        if i and (i >= MAX_ENTRIES or total > MAX_TOTAL_BYTES):
            _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _sources() -> tuple:
    """``(path, size, modification time)`` of each tracejit module this process has imported: those that
    generated and checked the code an entry holds (as Python's bytecode cache stamps each module's source)."""
    out = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if name == "tracejit" or name.startswith("tracejit.") else None
        if path:
            st = os.stat(path)
            out.append((path, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _unchanged(sources) -> bool:
    try:
        for path, size, mtime in sources:
            st = os.stat(path)
            if st.st_size != size or st.st_mtime_ns != mtime:
                return False
    except (OSError, TypeError, ValueError):
        return False
    return True
