"""Environment variables read by traced code: checked by the live program (hunt20).

``if os.environ.get("MODEL_FAST_PATH"):`` in forward froze the trace-time answer silently (torch.jit's too).
While a thread traces, ``os.environ``'s reads (``[]``, ``get``, ``in``: ``os.getenv`` goes through ``get``) made
by code that is not tracejit's, torch's or the standard library's note the name and the value (None: unset).
They join ``Graph.py_checks`` (support/object_checks.py): the live program compares ``os.environ.get(name)``
with the trace's value on every call and traces again on a change. A loaded program does not check them
(files do not hold py_checks): the findings of hunt20 list it as open.
"""
from __future__ import annotations

import os
import sys

from . import patches
from .source import _skipped
from .symbolic import get_tracer

_OS_FILES = (os.__file__,)


def _note(name) -> None:
    tracer = get_tracer()
    if tracer is None or not tracer.frames or not isinstance(name, str):
        return
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename in _OS_FILES or f is not None and "_collections_abc" in \
            f.f_code.co_filename:
        f = f.f_back
    if f is None or _skipped(f.f_code.co_filename):
        return   # torch's, tracejit's or the standard library's own read
    reads = tracer.__dict__.setdefault("env_reads", {})
    reads.setdefault(name, os.environ.get(name))


def _reader(original):
    def stand_in(self, key, *rest):
        _note(key)
        return original(self, key, *rest)
    stand_in.__name__ = getattr(original, "__name__", "stand_in")
    stand_in.__wrapped__ = original
    return stand_in


for _name in ("__getitem__", "get", "__contains__"):
    patches.register(type(os.environ), _name, _reader)


def entries(tracer) -> tuple:
    """py_checks entries (support/object_checks.py) for the variables ``tracer``'s code read."""
    reads = getattr(tracer, "env_reads", None)
    if not reads:
        return ()
    keys = tuple(sorted(reads))
    return (("os.environ", "environment", os.environ, keys, tuple(reads[k] for k in keys)),)
