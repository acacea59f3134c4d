"""Code that runs in the tracing thread during a trace but is not forward's: the garbage collector's work.

The stand-ins of trace/python_state.py note a clock read or a draw made by the tracing thread's code. Some
code runs in that thread without forward calling it: a ``gc.callbacks`` callback, a ``__del__`` and a
``weakref.finalize`` callback run when the collector (or a reference count reaching zero) frees something
forward allocated. What they do is not part of forward's answer, so it is neither refused nor warned.

How it is told (``outside_forward(frame)``):

- **a collection**: while any thread traces, two callbacks bracket ``gc.callbacks`` (one first, one last:
  ``patches.register_lifecycle``); the first sets a per-thread flag on ``"start"``, the last clears it on
  ``"stop"``, so every callback, and every ``__del__`` / finalizer / weakref callback the collector runs in
  between, runs with the flag set in the thread that collects;
- **a finalizer outside a collection** (a reference count reaching zero): a frame of a method named
  ``__del__`` or of ``weakref.finalize.__call__`` on the stack above the caller;
- **a ``weakref.ref(obj, callback)`` callback outside a collection**: the interpreter calls it, as if from
  forward's line, with one argument, the reference itself, whose referent is gone: a frame on the stack whose
  last positional argument is a dead ``weakref.ref`` (a function, a bound method or a ``functools.partial``
  given as the callback) is the reference's callback.

Limits: a ``gc.callbacks`` entry added while a trace is running is bracketed on ``"start"`` but not on
``"stop"``; forward calling ``obj.__del__()``, a ``weakref.finalize`` object, or a function with a dead weak
reference as its last argument itself is taken as not forward's.
"""
from __future__ import annotations

import gc
import threading
import weakref

from . import patches


class _Collecting(threading.local):
    depth = 0


_local = _Collecting()
_FINALIZE_CALL = weakref.finalize.__call__.__code__


def _first(phase: str, info: dict) -> None:
    if phase == "start":
        _local.depth += 1


def _last(phase: str, info: dict) -> None:
    if phase == "stop" and _local.depth > 0:
        _local.depth -= 1


def _install() -> None:
    gc.callbacks.append(_last)      # the closing one first: a collection in between never leaves the flag set
    gc.callbacks.insert(0, _first)


def _uninstall() -> None:
    for cb in (_first, _last):      # the opening one first, for the same reason
        while cb in gc.callbacks:
            gc.callbacks.remove(cb)


def reset() -> None:
    """A new trace in this thread starts outside any collection (a bracket removed mid-collection by another
    thread's last trace ending must not leave this thread's flag set)."""
    _local.depth = 0


def outside_forward(frame) -> bool:
    """Is ``frame`` (a caller of a stand-in, in the tracing thread) run by the collector or a finalizer?"""
    if _local.depth:
        return True
    f = frame
    while f is not None:
        code = f.f_code
        if code.co_name == "__del__" or code is _FINALIZE_CALL or _weakref_callback(f):
            return True
        f = f.f_back
    return False


def _weakref_callback(frame) -> bool:
    """Is ``frame`` a weak reference's callback, called with the reference to an object just freed?"""
    code = frame.f_code
    if not code.co_argcount:
        return False
    ref = frame.f_locals.get(code.co_varnames[code.co_argcount - 1])
    return isinstance(ref, weakref.ref) and ref() is None


patches.register_lifecycle(_install, _uninstall)
