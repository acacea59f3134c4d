"""What a failed guard does: a specialization chosen per call, never installed.

Each root method of a traced object holds a ``SpecializationSet``: an immutable tuple of
``Specialization`` records (the first trace, made from the example inputs, and one more per
input kind that failed its guards). A call runs the first trace; when one of its guards fails,
the others are tried (the one that last fitted first, then newest first); each one's own guards
decide. When none fits and the object holds its original, the original is traced again on the
call's inputs (one thread at a time, under the set's lock) and a new tuple that holds the new
trace is published: nothing any other thread is running is ever swapped, and each
specialization calls its own code for the whole module hierarchy (its submodule calls are
inlined: see ``Specialization``). Without an original (a loaded program, or after
``drop_original()``) a GuardError lists what every specialization required.

A call that leaves out a traced input whose forward has a default (a tokenizer that returns no
``token_type_ids``) chooses the same way among the specializations traced without it, and a live
object traces one (runtime/omitted_inputs.py).

A failed attempt leaves no trace: a program that writes in place before a later guard restores what it wrote
before the next attempt (runtime/undo.py); a retrace puts back what it wrote into captured tensors
(support/captured_writes.py). The set holds at most ``LIMIT`` specializations; the least recently used one
after the first is dropped, never one that ``specialize_for`` asked for, a file held or an optimized program
copied (``pinned``: those stay, beyond the limit if need be).
"""
from __future__ import annotations

import copy
import itertools
import threading

import torch

from ..errors import ArgumentTypeError, GuardError
from ..ir import nodes_with_callees
from ..trace.source import caller_stacklevel, warn_at
from ..support import captured_writes
from ..support.module_hooks import any_registered
from . import late_hooks, omitted_inputs
from .method_compiler import compile_method
from .undo import RetraceInputs, inputs_for_retrace, reads_history, undoable_call
from ..lazy_module import LazyModule

# what a retrace of a live object needs: a loaded program never retraces (a server's load imports none, issue #22)
_inline = LazyModule("..passes.inline", __package__)
_private_rng = LazyModule(".private_rng", __package__)
_state = LazyModule(".state", __package__)

LIMIT = 8
_ROUNDS = 8   # retraces one call may make while what its guards read keeps changing
_clock = itertools.count(1)   # "last used" stamps: a plain int written per hit, only a hint for eviction


class Specialization:
    """One trace of one root method, as plain data, with its compiled code kept beside it.

    ``graph``: the method's graph (the first trace: as traced, calling its submodules' own first
    traces; any later one: with every submodule call inlined, so it runs no code that belongs to
    another specialization). ``reason``: why it exists (the guard the others failed); ``source``:
    that guard's line. ``fn``: the compiled function, ``fn(self, *args)`` with ``self`` the root
    module (or the TracedFunction). Guards are the graph's ``tracejit::guard`` nodes.
    """

    __slots__ = ("method", "graph", "reason", "source", "fn", "last_used", "pinned")

    def __init__(self, method: str, fn, reason: str, source=None):
        self.method = method
        self.fn = fn
        self.graph = fn.graph
        self.reason = reason
        self.source = source
        self.last_used = 0
        self.pinned = False   # made ahead of time (specialize_for): never dropped for room

    @property
    def code(self) -> str:
        return self.fn.code

    @property
    def signature(self) -> str:
        return self.fn.signature

    @property
    def guards(self) -> list:
        """The guard nodes of this specialization (what it requires of a call)."""
        return required_guards(self.graph)

    def __repr__(self) -> str:
        return f"<Specialization: {self.reason}>"


def required_guards(graph) -> list:
    """The ``tracejit::guard`` nodes of ``graph`` and of the submodule graphs it calls."""
    return [n for n in nodes_with_callees(graph) if n.op == "tracejit::guard"]


class SpecializationSet:
    """The specializations of one root method. ``entries``: newest first, the first trace last.

    ``retrace(owner, args, kwargs)`` returns a compiled function (with ``.graph``) for the call's
    inputs, or is None when the original is gone. A deep copy of the owner gets its own set: the
    same (immutable) specializations, its own lock, retracing with the copy's tensors.
    """

    def __init__(self, owner, method: str, first_fn, retrace, limit: int = LIMIT, signature=None):
        self.owner, self.method, self.retrace, self.limit = owner, method, retrace, limit
        self.signature = signature      # the original's inspect.Signature: which inputs it may go without
        self.first = Specialization(method, first_fn, "the first trace")
        self.entries: tuple = (self.first,)
        self.traces = 0                 # how many times the original was traced again
        self.lock = threading.RLock()   # one thread at a time makes and publishes a specialization
        self._hint = None               # the specialization that last fitted after the first failed

    def __deepcopy__(self, memo):
        new = SpecializationSet.__new__(SpecializationSet)
        memo[id(self)] = new
        new.__dict__.update(self.__dict__)
        new.owner = copy.deepcopy(self.owner, memo)
        new.lock, new._hint = threading.RLock(), None
        return new

    def run(self, spec: Specialization, args, kwargs):
        checks = getattr(spec.fn, "memory_checks", None)   # Python state held beside the graph (method_compiler.py)
        checks is None or checks.check(self.method)
        return undoable_call(spec.fn, self.owner, args, kwargs)

    def handle(self, args, kwargs, error, wrong_names: bool = False):
        """The first trace raised ``error`` on these inputs: run another that fits, or make one.
        ``wrong_names``: ``error`` is the ArgumentTypeError of a call whose argument names the first
        trace does not take (runtime/omitted_inputs.py); else a GuardError.

        What a guard reads can change between attempts (another thread switches the training flag): each
        round tries every specialization again, a bounded number of rounds, and a retrace is always followed
        by a round that tries it (before, a flag flipping every millisecond under 8 calling threads made a
        call fail about one run in 20 of tests/threads: its last round's retrace was never tried, and the
        specializations that failed in earlier rounds were never tried again).
        """
        tried = {id(self.first)}
        failures = [] if wrong_names else [(self.first, error)]
        first_names = self.first.graph.param_names
        retraced = 0
        for round_ in range(_ROUNDS + 1):
            entries = self.entries       # one read: an immutable tuple, published whole
            hint = self._hint
            if round_:
                tried, failures = set(), []
            for spec in ([hint] if hint is not None and hint in entries else []) + list(entries):
                if id(spec) in tried:
                    continue
                tried.add(id(spec))
                same_names = spec.graph.param_names == first_names   # the common case: no signature to bind
                if not (not wrong_names if same_names else omitted_inputs.accepts(spec.fn, args, kwargs)):
                    continue
                try:
                    result = self.run(spec, args, kwargs)
                except GuardError as e:
                    if e.guard is None:
                        raise
                    failures.append((spec, e))
                    continue
                spec.last_used = next(_clock)
                self._hint = spec
                return result
            if round_ == _ROUNDS:
                break
            with self.lock:
                if self.entries is entries:   # else another thread published meanwhile: try them all again
                    if self.retrace is None or (
                            wrong_names and not omitted_inputs.original_accepts(self.signature, args, kwargs)):
                        raise none_fits(self.owner, self.method, failures) if failures else self._names_error(error)
                    inputs = RetraceInputs(args, kwargs, keep_history=reads_history(e for _, e in failures))
                    with captured_writes.undone():   # forward runs twice for this call: one write counts
                        fn = self.retrace(self.owner, *inputs.inputs)
                    inputs.check_untouched(self.method)
                    spec = Specialization(self.method, fn, *self._why(args, kwargs, failures))
                    self.traces += 1
                    retraced += 1
                    self._publish(spec)
                    _warn(spec, len(self.entries), self.limit)
        if wrong_names and not failures:
            raise self._names_error(error)
        raise none_fits(self.owner, self.method, failures or [(self.first, error)], retraced)

    def _names_error(self, error):
        """``error`` (a call whose argument names no trace takes), naming the other calls it serves."""
        first = self.first.signature
        others = list(dict.fromkeys(e.signature for e in self.extra() if e.signature != first))
        if not others:
            return error
        return ArgumentTypeError(f"{error}. It also serves calls as {'; '.join(others)}")

    def _why(self, args, kwargs, failures) -> tuple:
        """``(reason, source)`` of a new specialization: the guard the others failed, or the inputs
        the call left out."""
        if failures:
            return _reason(failures[0][1]), failures[0][1].source
        name = getattr(self.owner, "original_name", getattr(self.owner, "__name__", "the original"))
        return omitted_inputs.reason(self.first.fn, args, kwargs, f"{name}.{self.method}"), None

    def prepare(self, args, kwargs, module=None) -> Specialization | None:
        """Make a specialization for these inputs ahead of time unless one already fits them
        (``trace(..., specialize_for=[...])``); returns the new one, or None. The attempts run on
        copies of the inputs with no grad and private randomness, and ``module``'s buffers are put
        back after: preparing changes nothing the caller can see."""
        failures = []
        state = _state.ModuleState(module)
        try:
            with torch.no_grad(), _private_rng.PrivateRandomness():
                for spec in self.entries:
                    if not omitted_inputs.accepts(spec.fn, args, kwargs):   # traced with other inputs
                        continue
                    try:
                        self.run(spec, *inputs_for_retrace(args, kwargs))
                        return None
                    except GuardError as e:
                        if e.guard is None:
                            raise
                        failures.append(e)
        finally:
            state.restore()
        with self.lock:
            if self.retrace is None:
                raise none_fits(self.owner, self.method, list(zip(self.entries, failures)))
            why = (_reason(failures[-1]), failures[-1].source) if failures else self._why(args, kwargs, [])
            with captured_writes.undone():   # no call happened: no write into a captured tensor counts
                spec = Specialization(self.method, self.retrace(self.owner, *inputs_for_retrace(args, kwargs)),
                                      "specialize_for: " + why[0], why[1])
            spec.pinned = True
            self.traces += 1
            self._publish(spec)
        return spec

    def add(self, spec: Specialization) -> None:
        """Publish ``spec`` (a loaded file's specializations, an optimized program's copies of its
        source's): pinned, as every one of them was asked for."""
        spec.pinned = True
        with self.lock:
            self._publish(spec)

    def _publish(self, spec: Specialization) -> None:
        entries = (spec,) + self.entries
        droppable = [e for e in entries[1:] if e is not self.first and not e.pinned]
        if len(entries) > self.limit and droppable:   # drop the least recently used; the first trace stays
            victim = min(droppable, key=lambda e: e.last_used)
            entries = tuple(e for e in entries if e is not victim)
        self.entries = entries

    def extra(self) -> list:
        """The specializations other than the first, oldest first (the order a file stores them)."""
        return [e for e in reversed(self.entries) if e is not self.first]


def none_fits(owner, method: str, failures, retraced: int = 0) -> GuardError:
    """The GuardError for a call no specialization fits: what every one of them required.

    ``retraced``: how many times this call traced the original again (the object holds its original,
    and the new traces failed on these inputs too), said instead of the advice for objects without one."""
    first_error = failures[0][1]
    if len(failures) == 1 and not retraced:
        return first_error
    name = getattr(owner, 'original_name', getattr(owner, '__name__', 'program'))
    lines = [f"{name}.{method}: no specialization fits these inputs ({len(failures)} tried, each failed a guard):"]
    for k, (spec, e) in enumerate(failures, 1):
        lines.append(f"  {k}. {spec.reason}: {_requirement(e)}")
    if retraced:
        lines.append(f"This traced object holds its original and traced it again {retraced} time(s) for these "
                     "inputs, but each new trace failed its guard on them too: what that guard reads of the "
                     "inputs differs between the retrace (which runs on copies of the inputs, "
                     "runtime/undo.RetraceInputs) and this call. Pass inputs without that property (a "
                     "contiguous copy, x.detach()), or report it.")
    else:
        lines.append("A traced object that holds its original retraces for such inputs; a loaded program (or one "
                     "whose original was dropped) cannot: trace again with inputs like these, e.g. with "
                     "specialize_for=[...].")
    return GuardError("\n".join(lines), guard=first_error.guard, expected=first_error.expected,
                      seen=first_error.seen, source=first_error.source)


def _requirement(e: GuardError) -> str:
    text = str(e)
    head, sep, rest = text.partition(": guard failed at ")
    text = rest if sep else text.partition(": ")[2] or text
    return text.split(" A traced object that holds")[0]


def _reason(error: GuardError) -> str:
    node = error.guard
    a = node.attrs
    if a["test"] == "training" and a.get("path"):
        mode = "train" if a["expected"] else "eval"
        return f"submodule '{a['path']}' was traced in {mode} mode and is now in the other mode"
    if a["test"] == "training":
        return f"the module was traced in {'train' if a['expected'] else 'eval'} mode and is now in the other mode"
    where = f"{error.source.filename}:{error.source.lineno}" if error.source is not None else "the module"
    line = f" `{a['line']}`" if a.get("line") else ""
    return f"{a.get('what', a['kind'])} at {where}{line}: trace value {a.get('seen')!r}, now {error.seen!r}"


def _warn(entry: Specialization, n: int, limit: int) -> None:
    text = (f"a guard failed ({entry.reason}); traced again for these inputs (specialization {n} of at most "
            f"{limit} kept)")
    warn_at(text, entry.source, stacklevel=caller_stacklevel())


def on_guard_failure(owner, error: GuardError, args, kwargs, method: str = "forward"):
    """Called from a traced object's ``__call__`` when a guard of its first trace failed."""
    sets = owner.__dict__.get("_specialization_sets")
    spec_set = sets.get(method) if sets else None
    if spec_set is None or error.guard is None:
        raise error
    return spec_set.handle(args, kwargs, error)


def on_argument_error(owner, error, args, kwargs, method: str = "forward"):
    """Called from a traced object's ``__call__`` when a call raised ArgumentTypeError: where the first
    trace does not take the call's argument names (an input left out), run or make a specialization
    that does (runtime/omitted_inputs.py); any other argument error stands."""
    spec_set = sets_of(owner).get(method)
    if spec_set is None or omitted_inputs.accepts(spec_set.first.fn, args, kwargs):
        raise error
    return spec_set.handle(args, kwargs, error, wrong_names=True)


def sets_of(owner) -> dict:
    """``{method: SpecializationSet}`` of a traced object (empty when it has none)."""
    return owner.__dict__.get("_specialization_sets") or {}


def enable_for_function(traced, retrace_graph, signature=None) -> None:
    """``retrace_graph(args, kwargs)`` traces the original function again and returns its Graph
    (None: no original). ``signature``: the original's (which inputs a call may leave out)."""
    retrace = None
    if retrace_graph is not None:
        def retrace(owner, args, kwargs):
            return compile_method(retrace_graph(args, kwargs), "forward", traced.__name__, guards=True,
                                  display=traced.__name__)

    traced.__dict__["_specialization_sets"] = {"forward": SpecializationSet(traced, "forward", traced._fn, retrace,
                                                                            signature=signature)}


def enable_for_module(traced, retrace_methods, signatures=None) -> None:
    """``retrace_methods(mode, current, {name: (args, kwargs)})`` returns ``{path: {method: fn}}``
    (None: no original, as for a loaded program). ``signatures``: ``{method: inspect.Signature}`` of
    the original's methods (which inputs a call may leave out).

    ``traced(...)`` chooses among the specializations of ``forward``; every other root method
    (trace_module) is reached through a ``GuardedMethod`` that chooses among its own.
    """
    def retrace_for(name):
        if retrace_methods is None:
            return None

        def retrace(owner, args, kwargs):
            made = retrace_methods(owner.training, owner, {name: (args, kwargs)})[""][name]
            return compile_method(_inline.inline_calls(made.graph), name, f"{owner.original_name}.{name}", guards=True)
        return retrace

    sets = {name: SpecializationSet(traced, name, fn, retrace_for(name), signature=(signatures or {}).get(name))
            for name, fn in traced._traced_methods.items()}
    traced.__dict__["_specialization_sets"] = sets
    for name in sets:
        if name != "forward":
            object.__setattr__(traced, name, GuardedMethod(traced, name, sets[name]))


class GuardedMethod:
    """A root method of a traced module other than forward: chooses its specialization per call."""

    def __init__(self, owner, name: str, spec_set: SpecializationSet):
        self.owner, self.name, self.cache = owner, name, spec_set

    def __call__(self, *args, **kwargs):
        if any_registered():   # a global module hook (runtime/late_hooks.py)
            late_hooks.check_global(self, self.cache.first.fn.graph)
        try:
            return self.cache.run(self.cache.first, args, kwargs)
        except GuardError as e:
            if e.guard is None:
                raise
            return self.cache.handle(args, kwargs, e)
        except ArgumentTypeError as e:
            return on_argument_error(self.owner, e, args, kwargs, self.name)

    def _run(self, args, kwargs):   # the first trace only (the checker: a failed guard is reported)
        return self.cache.run(self.cache.first, args, kwargs)

    @property
    def specializations(self) -> list:
        return list(self.cache.entries)

    def __getattr__(self, attr):   # .graph, .code, .signature of the first trace
        return getattr(self.cache.first.fn, attr)


def drop_original(traced) -> None:
    """Forget the original: a failed guard that no specialization fits then raises GuardError."""
    for spec_set in sets_of(traced).values():
        spec_set.retrace = None
    if hasattr(traced, "_traced_retrace"):
        traced._traced_retrace = None
        traced._traced_float64 = None
