"""The process-wide entry points that tracing needs, installed once for all tracing threads.

Recording has to see a few calls that a TorchFunctionMode does not: ``range()`` of a traced
size, submodule calls (``nn.Module.__call__``), custom ``autograd.Function.apply`` and
``torch.jit.is_tracing()`` (through ``torch._C._is_tracing``, which torch.jit's own
``is_tracing`` calls at call time, so the function object that TorchScript maps to its builtin
stays the same; helpers wrapped by ``torch.jit._script_if_tracing`` are told False, so they run
as Python and are recorded rather than compiled into an opaque TorchScript call). Each
stand-in asks the calling thread's tracer (``symbolic.get_tracer``) and, in a thread that is
not tracing, does exactly what the original does.

The stand-ins are installed when the first thread starts tracing and removed when the last one
stops (a count under a lock), so concurrent traces can neither leave one in place nor remove
one that another thread still uses. A stand-in that someone replaced in the meantime is left
alone (theirs wins). ``quiet_warnings`` silences warnings for the calling thread only.

A stand-in that is a Python function answers ``inspect.signature`` as its original does
(``__signature__``): code that runs while a trace is on may introspect what it finds. torch 2.15
imports ``torch._dynamo`` the first time a Python meta kernel runs (``batch_norm`` on the ``meta``
device), and that import checks each function it registers a polyfill for against the polyfill's
signature: ``operator.index``'s stand-in, with its own ``(obj)``, failed the import half-way, which
broke every later use of torch._dynamo in the process (issue #23; tests/trace/test_stand_in_signatures.py).
"""
from __future__ import annotations

import builtins
import contextlib
import inspect
import os
import types
import sys
import threading
import warnings

import torch
import torch.jit._trace as jit_trace   # read, never called: the wrapper's code object (below)
from torch import nn

from . import autograd_fn
from .symbolic import get_tracer, traced_range

_lock = threading.Lock()
_users = 0
_installed: list[tuple[object, str, object, object]] = []   # (owner, attribute, original, stand-in)


def _after_fork_in_child() -> None:
    """A fork copies the lock as it was (maybe held by a thread that the child does not have)."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _script_if_tracing_wrapper():
    """The code of the wrapper that ``torch.jit._script_if_tracing`` puts around a helper: while tracing it
    compiles the helper with TorchScript and calls that, which a TorchFunctionMode cannot see into. Its
    ``is_tracing()`` is answered False, so the helper runs as Python and its ops are recorded."""
    outer = getattr(jit_trace, "_script_if_tracing", None)
    consts = getattr(getattr(outer, "__code__", None), "co_consts", ())
    codes = [c for c in consts if getattr(c, "co_name", "") == "wrapper"]
    return codes[0] if len(codes) == 1 else None


_SCRIPT_IF_TRACING_WRAPPER = _script_if_tracing_wrapper()


class _ThreadState(threading.local):
    module_calls = None   # the ModuleCalls recording submodule calls in this thread
    quiet = 0             # > 0: warnings raised in this thread are not shown


_local = _ThreadState()


def set_module_calls(calls):
    """Make ``calls`` this thread's submodule-call recorder; returns the previous one."""
    previous, _local.module_calls = _local.module_calls, calls
    return previous


def _stand_ins() -> list[tuple[object, str, object]]:
    original_call = nn.Module.__call__
    original_apply = torch.autograd.Function.__dict__["apply"]
    original_is_tracing = torch._C._is_tracing

    def __call__(module, *args, **kwargs):
        calls = _local.module_calls
        if calls is None or get_tracer() is not calls.tracer:
            return original_call(module, *args, **kwargs)
        return calls.call(module, original_call, args, kwargs)

    def apply(cls, *args, **kwargs):
        return autograd_fn.traced_apply(get_tracer(), original_apply, cls, args, kwargs)

    def _is_tracing() -> bool:
        if get_tracer() is None or _called_from(_SCRIPT_IF_TRACING_WRAPPER, depth=3):
            return original_is_tracing()
        return True

    return [(builtins, "range", traced_range), (nn.Module, "__call__", __call__),
            (torch.autograd.Function, "apply", classmethod(apply)), (torch._C, "_is_tracing", _is_tracing)]


class _QuietThread:
    """Stands where a warnings filter holds its message regex: matches only in quieted threads."""

    def match(self, text) -> bool:
        return _local.quiet > 0

    def __repr__(self) -> str:
        return "<tracejit: warnings of a thread re-running a trace for its check>"


_QUIET_FILTER = ("ignore", _QuietThread(), Warning, None, 0)


def _called_from(code, depth: int) -> bool:
    """Is the frame ``depth`` levels up from this function's own frame running ``code``?"""
    try:
        return code is not None and sys._getframe(depth).f_code is code
    except ValueError:   # the stack is not that deep
        return False


def _filters_changed() -> None:
    """Tell the warnings machinery that the filter list changed (it caches what it decided)."""
    changed = getattr(warnings, "_filters_mutated", None)
    if changed is not None:
        changed()


_ABSENT = object()   # the class had no attribute of its own (it inherited it)
_registered: list[tuple[object, str, object]] = []   # (owner, attribute, make_stand_in(original))


def register(owner, name: str, make_stand_in) -> None:
    """Patch ``owner.name`` too while any thread traces: ``make_stand_in(original)`` returns the stand-in,
    which must act only for the calling thread's tracer (``get_tracer()``) and otherwise call
    ``original``. Register at import time; it is installed from the next trace on."""
    with _lock:
        _registered.append((owner, name, make_stand_in))


def register_each(list_entries) -> None:
    """Like ``register`` for many attributes found when the stand-ins are installed: ``list_entries()``
    returns ``(owner, name, make_stand_in)`` triples (numpy_reads.py: every public numpy function)."""
    with _lock:
        _registered_lists.append(list_entries)


_registered_lists: list = []
_lifecycles: list = []   # (install, uninstall): process-wide state that is not an attribute (gc.callbacks)


def register_lifecycle(install, uninstall) -> None:
    """Call ``install()`` when the stand-ins are installed and ``uninstall()`` when they are removed (for state a
    stand-in cannot replace, such as the entries of ``gc.callbacks``: trace/not_forward.py)."""
    with _lock:
        _lifecycles.append((install, uninstall))


def _own(owner, name: str):
    if isinstance(owner, type):
        return owner.__dict__.get(name, _ABSENT)
    return getattr(owner, name, _ABSENT)


# every stand-in ever made, for the life of the process: (id(owner), name, id(make), ids of the originals) ->
# (owner, make, originals, stand-in). A later install reuses the same function object, and none is ever freed or
# cleared by the collector.
# A thread outside any trace may still hold a stand-in it looked up just before the uninstall (and CPython's type
# attribute cache hands out borrowed references): tests/threads once crashed in such a call, the stand-in's
# closure already cleared by the garbage collector (COPY_FREE_VARS on a NULL closure; docs/DESIGN.md, threads).
_made: dict = {}


def _made_once(owner, name: str, originals: tuple, make):
    """The stand-in ``make(*originals)`` for ``owner.name``, made on the first install with this ``make`` and these
    originals (each compared by identity) and kept."""
    key = (id(owner), name, id(make), tuple(map(id, originals)))
    hit = _made.get(key)
    if hit is not None and hit[0] is owner and hit[1] is make and all(a is b for a, b in zip(hit[2], originals)):
        return hit[3]
    stand_in = make(*originals)
    _made[key] = (owner, make, originals, stand_in)
    return stand_in


def _core_stand_ins(*originals) -> list:
    """``_stand_ins()``, made once for each set of the originals it reads."""
    return _stand_ins()


def _install() -> None:
    originals = (nn.Module.__call__, torch.autograd.Function.__dict__["apply"], torch._C._is_tracing)
    for owner, name, stand_in in _made_once(_stand_ins, "core", originals, _core_stand_ins):
        _put(owner, name, stand_in)
    entries = []
    for list_entries in _registered_lists:   # first: they nest inside single registrations, which ask who called
        entries += list_entries()
    entries += _registered
    for owner, name, make in entries:   # one after the other: two stand-ins for one attribute nest
        original = getattr(owner, name, None)   # None: only instances hold it (nn.Module.training)
        _put(owner, name, _made_once(owner, name, (original,), make))
    warnings.filters.insert(0, _QUIET_FILTER)
    _filters_changed()
    for install, _ in _lifecycles:
        install()


def _put(owner, name: str, stand_in) -> None:
    original = _own(owner, name)
    _same_signature(stand_in, getattr(owner, name, None))
    setattr(owner, name, stand_in)
    _installed.append((owner, name, original, stand_in))


_signatures: dict[int, tuple[object, object]] = {}   # id(original) -> (original, its signature or None)


def _same_signature(stand_in, original) -> None:
    """Let a Python-function stand-in report ``original``'s signature (where it has one)."""
    if not isinstance(stand_in, types.FunctionType) or "__signature__" in stand_in.__dict__:
        return
    known = _signatures.get(id(original))
    if known is None or known[0] is not original:
        try:
            sig = inspect.signature(original)
        except (TypeError, ValueError):   # a builtin without a text signature (max, min): nothing to copy
            sig = None
        known = _signatures[id(original)] = (original, sig)
    if known[1] is not None:
        stand_in.__signature__ = known[1]


def _uninstall() -> None:
    for _, uninstall in _lifecycles:
        uninstall()
    if any(f is _QUIET_FILTER for f in warnings.filters):
        warnings.filters[:] = [f for f in warnings.filters if f is not _QUIET_FILTER]
        _filters_changed()
    while _installed:
        owner, name, original, stand_in = _installed.pop()
        if _own(owner, name) is not stand_in:
            continue   # replaced by someone else meanwhile: theirs stays
        if original is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


@contextlib.contextmanager
def installed():
    """The stand-ins are in place inside this block (for every thread; they act for tracing threads)."""
    global _users
    with _lock:
        if _users == 0:
            try:
                _install()
            except BaseException:
                _uninstall()
                raise
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                _uninstall()


@contextlib.contextmanager
def quiet_warnings():
    """Warnings raised by the calling thread inside this block are not shown (other threads' are).

    ``warnings.catch_warnings`` would swap the process-wide filter list, which hides other
    threads' warnings meanwhile, and two threads leaving it in another order than they entered
    leave it changed. Instead one filter, first in the list while any thread traces, ignores the
    warnings of quieted threads only.
    """
    with installed():
        _local.quiet += 1
        try:
            yield
        finally:
            _local.quiet -= 1
