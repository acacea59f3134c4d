"""Find the user's source line: the innermost frame outside tracejit and torch's internals."""
from __future__ import annotations

import os
import sys
import warnings

import torch

from ..ir import SourceLoc

_TRACEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
# torch's own layer code is where a module's ops really come from; keep those frames
_TORCH_KEEP = (os.path.join(_TORCH_DIR, "nn", "modules") + os.sep,)
_CONTEXTLIB = os.path.dirname(os.__file__) + os.sep + "contextlib.py"
# numpy's own Python code (np.linspace reading a traced size): the line that matters is the caller's
_NUMPY_DIR = os.sep + "site-packages" + os.sep + "numpy" + os.sep

_skip_cache: dict[str, bool] = {}


def _skipped(filename: str) -> bool:
    r = _skip_cache.get(filename)
    if r is None:
        r = filename.startswith(_TRACEJIT_DIR) and not filename.startswith(_TRACEJIT_DIR + "tests") or (
            filename.startswith(_TORCH_DIR) and not filename.startswith(_TORCH_KEEP)
        ) or filename == _CONTEXTLIB or filename.startswith("<tracejit") or _NUMPY_DIR in filename
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


def warn_at(text: str, source: SourceLoc | None, stacklevel: int) -> None:
    """A TracerWarning at the user's source line when it is known, else ``stacklevel`` frames above
    the caller of ``warn_at``."""
    from ..errors import TracerWarning
    if source is not None:
        warnings.warn_explicit(text, TracerWarning, source.filename, source.lineno, module="tracejit")
    else:
        warnings.warn(text, TracerWarning, stacklevel=stacklevel + 1)
