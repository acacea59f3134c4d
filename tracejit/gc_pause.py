"""Python's cyclic garbage collector paused while tracejit imports its modules or builds a loaded program.

Right after ``import torch`` the process owes the collector a full collection of torch's ~1M objects
(250-300 ms on this machine); the thousands of small acyclic objects that an import or a load makes
would trigger it (bench/fresh_load.py). Reference counting frees everything they drop; the collection
stays due, for the process's next allocations (``gc.freeze()`` after a server's imports makes it
cheap, docs/DEPLOY.md).

The pause is counted under a lock, so threads that import or load at the same time (or a load inside
an import) share one pause: the collector is turned back on when the last of them leaves, and only if
it was on when the first came in (the caller's setting is left as it was)."""
from __future__ import annotations

import contextlib
import gc
import threading

_lock = threading.Lock()
_holders = 0
_was_enabled = False


@contextlib.contextmanager
def collector_paused():
    """The collector off while the block runs (shared by concurrent and nested blocks), then as it was."""
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()
