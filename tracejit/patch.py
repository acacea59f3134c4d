"""patch_torch_jit(): route torch.jit's tracing entry points to tracejit, for code you do not own.

While patched, torch.jit's ``trace`` and ``trace_module`` attributes are tracejit's; its ``save``
saves tracejit's traced objects with tracejit (anything else goes to torch's own save);
``torch.jit.load`` loads tracejit files with tracejit (a TorchScript zip, which starts with ``PK``,
goes to torch's own load). torch.jit's two public classes need no patch: tracejit's TracerWarning
and TracingCheckError are subclasses of them.

Limits: only the attributes of the ``torch.jit`` module are replaced, so code that did
``from torch.jit import trace`` before the patch keeps torch's function; the patch is
process-wide (all threads see it).

>>> import torch, tracejit
>>> with tracejit.patch_torch_jit():
...     getattr(torch.jit, "trace") is tracejit.trace
True
>>> getattr(torch.jit, "trace") is tracejit.trace
False
"""
from __future__ import annotations

import os
import threading

import torch
import torch.jit

from . import api, porting
from .runtime.traced import TracedFunction, TracedModule

_NAMES = ("trace", "trace_module", "save", "load")
_lock = threading.Lock()
_depth = 0
_originals: dict = {}
_installed: dict = {}


def _save(m, f, _extra_files=None, **options):
    """torch.jit.save while patched: tracejit's objects are saved by tracejit."""
    if isinstance(m, (TracedFunction, TracedModule)):
        return porting.save(m, f, _extra_files, **options)
    return _originals["save"](m, f, _extra_files if _extra_files is not None else {}, **options)


def _load(f, map_location=None, _extra_files=None, **options):
    """torch.jit.load while patched: a TorchScript zip goes to torch, anything else to tracejit."""
    if isinstance(f, (str, os.PathLike)) and not os.path.exists(f):
        return _originals["load"](f, map_location, _extra_files, **options)   # torch's own error (ValueError)
    if _starts_with_zip_magic(f):
        return _originals["load"](f, map_location, _extra_files, **options)
    return porting.load(f, map_location, _extra_files, **options)


def _starts_with_zip_magic(f) -> bool:
    if isinstance(f, (str, os.PathLike)):
        try:
            with open(f, "rb") as fh:
                return fh.read(2) == b"PK"
        except OSError:
            return False     # tracejit's load reports the problem
    if hasattr(f, "read") and hasattr(f, "seek") and hasattr(f, "tell"):
        pos = f.tell()
        head = f.read(2)
        f.seek(pos)
        return head == b"PK"
    return False


class _Patch:
    """The handle patch_torch_jit() returns: undo it with ``.undo()`` or use it as a context manager."""

    def __init__(self):
        self.active = True

    def undo(self) -> None:
        if self.active:
            self.active = False
            unpatch_torch_jit()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def patch_torch_jit() -> _Patch:
    """Route ``torch.jit.trace``, ``trace_module``, ``save`` and ``load`` to tracejit.

    Use it once (``tracejit.patch_torch_jit()``, undone by ``tracejit.unpatch_torch_jit()``) or as a
    context manager (``with tracejit.patch_torch_jit(): ...``). Patches nest: torch.jit's own
    functions come back when the outermost one is undone.
    """
    global _depth
    with _lock:
        if _depth == 0:
            _originals.update({name: getattr(torch.jit, name) for name in _NAMES})
            # assigned directly, with no wrapper in between: tracejit reads the caller's frames to
            # attribute its warnings to the user's source lines
            _installed.update(trace=api.trace, trace_module=api.trace_module, save=_save, load=_load)
            for name, fn in _installed.items():
                setattr(torch.jit, name, fn)
        _depth += 1
    return _Patch()


def unpatch_torch_jit() -> None:
    """Undo one ``patch_torch_jit()``; after the outermost, torch.jit's functions are back.

    An attribute that someone else replaced after the patch is left as they set it.
    """
    global _depth
    with _lock:
        if _depth == 0:
            raise RuntimeError("tracejit.unpatch_torch_jit() was called, but torch.jit is not patched")
        _depth -= 1
        if _depth == 0:
            for name, original in _originals.items():
                if getattr(torch.jit, name) is _installed[name]:
                    setattr(torch.jit, name, original)
            _originals.clear()
            _installed.clear()


def is_patched() -> bool:
    """True while torch.jit is routed to tracejit."""
    return _depth > 0
