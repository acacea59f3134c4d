"""What a failed guard does: retrace for the new inputs, keep each trace in a small bounded cache.

A traced object that still holds its original function or module gets a
``SpecializationCache``. When a guard fails, the cached traces are tried (most
recently used first; each one's own guards say whether it fits); when none
fits, the original is traced again on the call's inputs, with a TracerWarning
naming the guard and its source line. The cache holds at most ``LIMIT``
traces; the least recently used one is dropped. Without an original (a loaded
program, or after ``drop_original()``) the GuardError is raised.
"""
from __future__ import annotations

import contextlib
import threading

from torch import nn

from ..errors import GuardError
from ..trace.source import caller_stacklevel, warn_at

LIMIT = 8


class Specialization:
    """One trace in the cache: what it runs, and the guard failure that made it."""

    def __init__(self, payload, reason: str, source=None):
        self.payload = payload      # a compiled function, or {path: {method: fn}} for a module
        self.reason = reason
        self.source = source

    @property
    def code(self) -> str:
        return _main_fn(self.payload).code

    @property
    def graph(self):
        return _main_fn(self.payload).graph

    def __repr__(self) -> str:
        return f"<Specialization: {self.reason}>"


def _main_fn(payload):
    return payload[""]["forward"] if isinstance(payload, dict) else payload


class SpecializationCache:
    """``retrace(args, kwargs)`` -> payload; ``install(payload)`` makes it the one that runs."""

    def __init__(self, first, retrace, install, limit: int = LIMIT):
        self.first = Specialization(first, "the first trace")   # what save writes; never dropped
        self.entries = [self.first]   # most recently used first
        self.retrace = retrace
        self.install = install
        self.limit = limit
        self.traces = 0             # how many times the original was traced again
        self.lock = threading.RLock()   # one thread at a time picks, installs or makes a specialization

    def handle(self, run, args, kwargs, error: GuardError):
        """The current trace raised ``error`` on these inputs: run a cached one that fits, or retrace."""
        with self.lock:
            return self._handle(run, args, kwargs, error)

    def _handle(self, run, args, kwargs, error: GuardError):
        for entry in self.entries[1:]:
            self.install(entry.payload)
            try:
                result = run(args, kwargs)
            except GuardError as e:
                if e.guard is None:
                    raise
                continue
            self.entries.remove(entry)
            self.entries.insert(0, entry)
            return result
        if self.retrace is None:
            self.install(self.entries[0].payload)
            raise error
        try:
            payload = self.retrace(args, kwargs)
        except BaseException:
            self.install(self.entries[0].payload)
            raise
        self.traces += 1
        entry = Specialization(payload, _reason(error), error.source)
        self.entries.insert(0, entry)
        if len(self.entries) > self.limit:   # drop the least recently used; the first trace stays
            self.entries.remove(next(e for e in reversed(self.entries) if e is not self.first))
        _warn(entry, len(self.entries), self.limit)
        self.install(payload)
        try:
            return run(args, kwargs)
        except GuardError as again:
            if again.guard is None:
                raise
            raise GuardError(
                f"{str(again).split(' A traced object that holds its original')[0]} This object holds its "
                "original and traced it again on these very inputs, but the new trace fails a guard on them too: "
                "the traced code read something whose value differs between tracing and running (a value read "
                "twice that changes, or state that the trace changed). Trace it with inputs and state as they "
                "will be at call time.", guard=again.guard, expected=again.expected, seen=again.seen,
                source=again.source) from None


def _reason(error: GuardError) -> str:
    node = error.guard
    a = node.attrs
    if a["test"] == "training":
        return f"the module was traced in {'train' if a['expected'] else 'eval'} mode and is now in the other mode"
    where = f"{error.source.filename}:{error.source.lineno}" if error.source is not None else "the module"
    line = f" `{a['line']}`" if a.get("line") else ""
    return f"{a.get('what', a['kind'])} at {where}{line}: trace value {a.get('seen')!r}, now {error.seen!r}"


def _warn(entry: Specialization, n: int, limit: int) -> None:
    text = (f"a guard failed ({entry.reason}); traced again for these inputs (specialization {n} of at most "
            f"{limit} kept)")
    warn_at(text, entry.source, stacklevel=caller_stacklevel())


@contextlib.contextmanager
def first_trace_installed(owner):
    """While in the block, ``owner`` runs (and shows) the trace made from its example inputs, whatever
    specialization later calls installed; the state before is put back after. ``save`` uses it, so a
    file holds the same program however the traced object was called before."""
    attrs = getattr(owner, "__dict__", {})   # anything else is refused by save itself
    caches = [c for c in (attrs.get("_specializations"),) if isinstance(c, SpecializationCache)]
    caches += [m.cache for m in attrs.values() if isinstance(m, GuardedMethod)]
    if not caches:
        yield
        return
    with contextlib.ExitStack() as stack:
        for cache in caches:
            stack.enter_context(cache.lock)
        before = _snapshot(owner)
        for cache in caches:
            cache.install(cache.first.payload)
        try:
            yield
        finally:
            _restore(owner, before)


def _snapshot(owner):
    if isinstance(owner, nn.Module):
        guarded = {k: v for k, v in vars(owner).items() if isinstance(v, GuardedMethod)}
        return guarded, {path: dict(m._traced_methods) for path, m in owner.named_modules()
                         if getattr(m, "_traced_methods", None)}
    return owner._fn


def _restore(owner, before) -> None:
    if not isinstance(owner, nn.Module):
        owner._fn = before
        return
    guarded, methods_by_path = before
    for path, methods in methods_by_path.items():
        target = owner.get_submodule(path) if path else owner
        for name, fn in methods.items():
            target._install(name, fn)
    for name, method in guarded.items():   # the root's other methods stay behind their GuardedMethod
        object.__setattr__(owner, name, method)


def on_guard_failure(owner, error: GuardError, run, args, kwargs):
    """Called from a traced object's ``__call__`` when a guard failed."""
    cache = getattr(owner, "_specializations", None)
    if cache is None or error.guard is None:
        raise error
    return cache.handle(run, args, kwargs, error)


def enable_for_function(traced, retrace_graph) -> None:
    """``retrace_graph(args, kwargs)`` traces the original function again and returns its Graph."""
    from .traced import compile_method

    def retrace(args, kwargs):
        return compile_method(retrace_graph(args, kwargs), "forward", traced.__name__, guards=True,
                              display=traced.__name__)

    def install(fn):
        traced._fn = fn

    traced._specializations = SpecializationCache(traced._fn, retrace, install)


def enable_for_module(traced, retrace_methods) -> None:
    """``retrace_methods(mode, current, {name: (args, kwargs)})`` returns ``{path: {method: fn}}``.

    ``traced(...)`` specializes ``forward``; every other root method (trace_module) is installed
    behind a ``GuardedMethod`` that specializes it the same way.
    """
    first = {path: dict(m._traced_methods) for path, m in traced.named_modules() if m._traced_methods}
    others = [n for n in traced._traced_methods if n != "forward"]

    def install(variant):
        for path, methods in variant.items():
            target = traced.get_submodule(path) if path else traced
            for name, fn in methods.items():
                target._install(name, fn)
        for name in others:
            object.__setattr__(traced, name, guarded[name])

    def cache_for(name):
        def retrace(args, kwargs):
            return retrace_methods(traced.training, traced, {name: (args, kwargs)})
        return SpecializationCache(first, retrace, install)

    guarded = {name: GuardedMethod(traced, name, cache_for(name)) for name in others}
    object.__setattr__(traced, "_specializations", cache_for("forward"))
    install({})


class GuardedMethod:
    """A root method of a traced module other than forward: calls it, specializes on a failed guard."""

    def __init__(self, owner, name: str, cache: SpecializationCache):
        self.owner, self.name, self.cache = owner, name, cache

    def _run(self, args, kwargs):
        from .traced import call_checked
        fn = self.owner._traced_methods[self.name]
        return call_checked(fn.__get__(self.owner), fn.signature, args, kwargs, fn.graph)

    def __call__(self, *args, **kwargs):
        try:
            return self._run(args, kwargs)
        except GuardError as e:
            if e.guard is None:
                raise
            return self.cache.handle(self._run, args, kwargs, e)

    @property
    def specializations(self) -> list:
        return list(self.cache.entries)

    def __getattr__(self, attr):   # .graph, .code, .signature of the method that runs now
        return getattr(self.owner._traced_methods[self.name], attr)


def drop_original(traced) -> None:
    """Forget the original: a failed guard then raises GuardError instead of retracing."""
    cache = getattr(traced, "_specializations", None)
    if cache is not None:
        cache.retrace = None
    for name in list(getattr(traced, "_traced_methods", {})):
        method = traced.__dict__.get(name)
        if isinstance(method, GuardedMethod):
            method.cache.retrace = None
    if hasattr(traced, "_retrace"):
        traced._retrace = None
