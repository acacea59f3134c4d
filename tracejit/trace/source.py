"""Find the user's source line: the innermost frame outside tracejit and torch's internals."""
from __future__ import annotations

import linecache
import os
import sys
import warnings

import torch

from ..errors import TracerWarning
from ..ir import SourceLoc

_TRACEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
# torch's own layer code is where a module's ops really come from; keep those frames
_TORCH_KEEP = (os.path.join(_TORCH_DIR, "nn", "modules") + os.sep,)
_CONTEXTLIB = os.path.dirname(os.__file__) + os.sep + "contextlib.py"
# the standard library and numpy read values on the user's behalf (copy.copy(n), np.linspace(0, 1, n)):
# a guard names the user's line that called them
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep
try:
    import numpy as _np
    _NUMPY_DIR = os.path.dirname(os.path.abspath(_np.__file__)) + os.sep
except ImportError:   # pragma: no cover
    _NUMPY_DIR = "\0"

_skip_cache: dict[str, bool] = {}


def _skipped(filename: str) -> bool:
    r = _skip_cache.get(filename)
    if r is None:
        r = filename.startswith(_TRACEJIT_DIR) and not filename.startswith(_TRACEJIT_DIR + "tests") or (
            filename.startswith(_TORCH_DIR) and not filename.startswith(_TORCH_KEEP)
        ) or filename == _CONTEXTLIB or filename.startswith("<tracejit") or filename.startswith(_NUMPY_DIR) or (
            filename.startswith(_STDLIB_DIR) and "-packages" + os.sep not in filename)
        _skip_cache[filename] = r
    return r


def user_location(depth: int = 1) -> SourceLoc | None:
    """Source location of the innermost frame that is user (or torch.nn layer) code."""
    f = sys._getframe(depth)
    while f is not None:
        code = f.f_code
        if not _skipped(code.co_filename):
            return SourceLoc(code.co_filename, f.f_lineno, code.co_name)
        f = f.f_back
    return None


_OVERRIDES = os.path.join(_TORCH_DIR, "overrides.py")


def read_by_torch(depth: int = 1) -> bool:
    """Is the innermost frame outside tracejit (and torch's dispatch helper) torch's own code?"""
    f = sys._getframe(depth)
    while f is not None:
        name = f.f_code.co_filename
        if not (name.startswith(_TRACEJIT_DIR) and not name.startswith(_TRACEJIT_DIR + "tests")) \
                and name != _OVERRIDES:
            return name.startswith(_TORCH_DIR)
        f = f.f_back
    return False


def in_torch(loc: SourceLoc) -> bool:
    """Is this location inside torch's own package (its layer code)?"""
    return loc.filename.startswith(_TORCH_DIR)


def caller_stacklevel() -> int:
    """``stacklevel`` for warnings.warn that points at the first frame outside tracejit."""
    f = sys._getframe(1)
    level = 1
    while f is not None and f.f_code.co_filename.startswith(_TRACEJIT_DIR):
        f = f.f_back
        level += 1
    return level


def source_text(loc) -> str:
    """The source line at ``loc`` (a SourceLoc or None), stripped and cut to 200 characters."""
    if loc is None:
        return ""
    return linecache.getline(loc.filename, loc.lineno).strip()[:200]


def warn_at(text: str, source: SourceLoc | None, stacklevel: int) -> None:
    """A TracerWarning at the user's source line when it is known, else ``stacklevel`` frames above
    the caller of ``warn_at``."""
    if source is not None:
        warnings.warn_explicit(text, TracerWarning, source.filename, source.lineno, module="tracejit")
    else:
        warnings.warn(text, TracerWarning, stacklevel=stacklevel + 1)
