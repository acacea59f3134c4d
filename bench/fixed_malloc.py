"""``--fixed-malloc`` of the bench scripts: glibc's allocator told to keep freed memory (no trimming, no mmap per
large block), for every peer in the process alike.

By default glibc returns freed memory to the kernel (the heap's top past the trim threshold; blocks over the mmap
threshold, which it adapts as blocks are freed). A program whose blocks come and go at the wrong sizes then pays
page faults on every call, and which program does depends on the history of the process's heap: swin_tv at batch 8
(one thread, quiet) ran its optimized program at 12.4 ms with 2,550 minor faults per call beside eager's 6.4 ms
(78 faults) and the traced program's 5.7 ms (0), and at 6.3 ms (183 faults) in another process with other peers
built first. With the thresholds fixed, no peer faults (6.1 / 6.1 / 5.4 ms). A server that wants steady latency
does the same (``GLIBC_TUNABLES=glibc.malloc.trim_threshold=...:glibc.malloc.mmap_threshold=...``, or jemalloc /
tcmalloc: docs/DEPLOY.md).
"""
from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # glibc's malloc.h
TRIM_THRESHOLD = 1 << 30
MMAP_THRESHOLD = 1 << 28   # blocks up to 256 MB come from the heap (glibc's maximum on 64-bit is 32 MB by default)


def fix_malloc() -> str:
    """Fix glibc's trim and mmap thresholds for this process; returns what was done (for the report's header)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    except (OSError, AttributeError):
        ok = False
    return ("glibc malloc: trim threshold 1 GB, mmap threshold 256 MB (fixed)" if ok
            else "glibc malloc: not fixed (mallopt unavailable)")
