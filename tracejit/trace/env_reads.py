"""Environment variables the user's code reads while tracing (``os.environ["X"]``, ``os.environ.get``,
``os.getenv``, ``"X" in os.environ``) become ``global`` guards on ``os.environ`` (trace/global_reads.py): eager
reads the variable again at every call, a traced program holds what it read then. While a thread traces,
``os.environ``'s class reads keys through stand-ins that note each key read by the user's code (not by torch's,
the standard library's or an installed package's: the first caller outside the standard library decides) on
the recording's outer-state watch. A variable absent when traced is guarded as unbound.
"""
from __future__ import annotations

import os
import sys

from ..ir import SourceLoc
from . import patches
from .frame_returns import _STDLIB, _is_user
from .outer_state import _installed_library
from .symbolic import get_tracer


def _reader_caller():
    """The first frame outside the standard library (``os.getenv``, ``Mapping.get``) above the stand-in."""
    f = sys._getframe(3)   # <- _note <- the stand-in <- its caller
    while f is not None and f.f_code.co_filename.startswith((_STDLIB, "<frozen")):
        f = f.f_back
    return f


def _note(mapping, key) -> None:
    tracer = get_tracer()
    watch = getattr(tracer, "python_state", None) if tracer is not None else None
    outer = getattr(watch, "outer", None)
    if outer is None or mapping is not os.environ or not isinstance(key, str) or key in outer.env_reads:
        return
    caller = _reader_caller()
    name = caller.f_code.co_filename if caller is not None else "<unknown>"
    if _is_user(name) and not _installed_library(name):
        outer.env_reads[key] = SourceLoc(name, caller.f_lineno, caller.f_code.co_name)


def _noting(original):
    """The stand-in of one of os.environ's key reads (``__getitem__``, ``__contains__``): note the key, then read."""
    def stand_in(self, key):
        if get_tracer() is not None:
            _note(self, key)
        return original(self, key)
    stand_in.__name__ = original.__name__
    return stand_in


for _read in ("__getitem__", "__contains__"):   # .get / os.getenv / `in` go through these
    patches.register(type(os.environ), _read, _noting)
