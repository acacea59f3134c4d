"""trace() and trace_module(): record, build the traced object, check it."""
from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from ..errors import FirstCallSetUpError, TraceError
from ..ir import Graph
from ..pytree import flatten, unflatten
from .calls import ModuleCalls, bind_inputs, bind_outputs, check_backward_hooks
from .escapes import EscapedTensorError
from .ledger import Ledger
from .guards import check_policy
from .recorder import Frame, Tracer
from . import attribute_tensors, boundary, fast_paths, first_access, capture, env_reads, frame_returns, global_reads, global_state, global_tensors, legacy, module_config, module_flags, patches, python_state  # noqa: F401,E501  (stand-ins register)
from . import attempts, backend_flags, rewind_state, callable_attrs, global_hooks, input_keys, outer_state, rng_record  # noqa: F401  (rng_record's, backend_flags' stand-ins register)
from . import rewrites as attribute_rewrites
from .symbolic import get_tracer, set_tracer


def _distinct_inputs(args, kwargs, module=None):
    """The same tensor passed as two arguments becomes two views of it, so the trace keeps them apart;
    so does a parameter or buffer of the traced module passed as an input (``trace(m, m.weight)``)."""
    leaves, spec = flatten((tuple(args), dict(kwargs)))
    seen: set[int] = set()
    if module is not None:
        seen.update(id(t) for t in module.parameters())
        seen.update(id(t) for t in module.buffers())
    out = []
    with torch._C.DisableTorchFunction():
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                if id(leaf) in seen:
                    leaf = leaf.view_as(leaf)
                seen.add(id(leaf))
            out.append(leaf)
    return unflatten(spec, out)


class Recording:
    """What one traced method produced: its graph, the submodule graphs, and the ledger."""

    def __init__(self, graph: Graph, methods: dict, ledger: Ledger, result, lazy=()):
        self.graph = graph
        self.methods = methods
        self.ledger = ledger
        self.result = result
        self.lazy = list(lazy)   # (module, attribute) forward set from None: a lazy set-up (trace/python_state.py)
        self.rewritten = []   # (path, module, attribute, value): written again identically by the run (rewrites.py)


@contextlib.contextmanager
def lazy_setups_undone(lazy):
    """Inside: each ``(module, attribute)`` of ``lazy`` is None again, as before the first call that set it up; on
    leaving, each holds what that first call set (eager's state from then on). The checker's retrace runs inside,
    so it records the first call's path, as the trace did, not the path of the calls after it."""
    kept = [(m, key, getattr(m, key)) for m, key in lazy]
    for m, key, _ in kept:
        setattr(m, key, None)
    try:
        yield
    finally:
        for m, key, value in kept:
            setattr(m, key, value)


def is_tracing() -> bool:
    """True while tracejit is recording (``torch.jit.is_tracing()`` answers the same then)."""
    return get_tracer() is not None


@contextlib.contextmanager
def _tracing_state(tracer: Tracer):
    """Make ``tracer`` this thread's tracer (mode, submodule calls, is_tracing); restore everything after.

    The entry points tracing needs are process-wide stand-ins (``patches``) that act only for the
    thread whose tracer is set, so other threads, and other threads' traces, see nothing of this one.
    """
    if get_tracer() is not None:
        raise TraceError("tracejit.trace was called while this thread is recording another trace")
    grad = torch.is_grad_enabled()
    with patches.installed():
        set_tracer(tracer)
        try:
            with ModuleCalls(tracer).active(), capture.patches_for(tracer), tracer:
                yield
        finally:
            set_tracer(None)
            torch.set_grad_enabled(grad)


def _refuse_uninitialized(module: nn.Module) -> None:
    """A lazy module (``nn.LazyLinear``) before its first call has no weights to trace with."""
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if is_lazy(t):
            owner = name.rpartition(".")[0]
            kind = type(module.get_submodule(owner)).__name__
            raise TraceError(f"{name!r} of {kind} {owner or 'the root'!r} is not initialized yet (a lazy module): "
                             "call the module once on an example input before tracing it, so its shapes are set "
                             "(torch.jit.trace needs the same)")


def record(fn, args: tuple, kwargs: dict, module: nn.Module | None, **options) -> Recording:
    """Run ``fn(*args, **kwargs)`` once, recording every PyTorch op it calls (options: ``_record_run``'s).

    Where a submodule call's tensor reached its caller another way than the call's return value (trace/escapes.py),
    forward runs again with those calls traced through in place, if the first run changed nothing a caller can
    see (trace/attempts.py); else the escape is a TraceError saying what was written. A run that only set the
    module up (python_state.FirstCallSetUpError) is followed by one more, from the state it left.
    """
    through, warned, set_up = frozenset(), set(), False
    rewrites = attribute_rewrites.Rewrites.again(options.pop("rewritten", ()))   # the checker's retrace: as traced
    after_one_call = None   # the model's Python state before a second run: put back if the trace fails after it
    rng_before, randomness = torch.default_generator.get_state(), contextlib.nullcontext()
    try:
        for run in range(attempts.MAX_ATTEMPTS):
            if run == 1 and module is not None:
                after_one_call = rewind_state.HierarchyState(module)
            attempt = attempts.Attempt(args, kwargs, module, options.get("registry"))
            attempt.expected_rewrites = rewrites   # the run before changed these: written again? (trace/rewrites.py)
            attempt.rng_before = rng_before
            first_call = False
            try:
                with randomness:   # a second run's draws: private, the first run's numbers (attempts.py)
                    rec = _record_run(fn, args, kwargs, module, through=through, attempt=attempt, warned=warned,
                                      **options)
                escaped, error = rec.escaped, None
            except EscapedTensorError as e:
                escaped, error = e.through, e
            except FirstCallSetUpError as e:   # the run only set the module up: record the next call
                escaped, error, first_call = through, e, not set_up
            problem = rewrites.problem() if rewrites is not None else None
            if problem is not None:
                raise TraceError(
                    f"tracejit recorded forward again from the state its first run left, but {problem}: the program "
                    "would read a value eager's next call does not find (keep state that changes per call in tensors "
                    "(buffers updated in place) or outside forward)") from error
            if escaped <= through and not first_call:   # nothing new to trace through (or nothing escaped)
                if error is not None:
                    raise error
                rec.rewritten = rewrites.held() if rewrites is not None else []
                return rec
            set_up = set_up or first_call
            written = attempt.changed()
            if written is not None:
                again = "from the state it set up" if first_call else "with that call traced through in place"
                raise TraceError(f"{error if error is not None else _CAUGHT}\n(tracejit would record forward again "
                                 f"{again}, but the first run changed state a caller sees: {written})") from error
            attempt.rewind()
            rewrites = attempt.rewrites
            if run == 0:
                randomness = attempt.private_randomness()
            elif not isinstance(randomness, contextlib.nullcontext):   # the private mode of run 1
                randomness.rewind()
            _plain_sizes(module)   # the next run starts from eager's state: plain ints
            through |= escaped
        raise TraceError(f"a tensor kept escaping its submodule's call after tracing {sorted(through)} through")
    except BaseException:
        if after_one_call is not None:   # a refused trace leaves the model as after one eager call (rewind_state.py)
            after_one_call.restore()
        raise
    finally:
        _plain_sizes(module)


def _plain_sizes(module) -> None:
    """Traced sizes forward left in attributes become plain ints (first_access.plain_sizes)."""
    if module is not None:
        first_access.plain_sizes(obj for obj, _ in python_state.snapshot(module).values())


_CAUGHT = ("a tensor computed inside a submodule reached its caller other than through the call's return value, "
           "and the traced code caught tracejit's error about it")


def _record_run(fn, args: tuple, kwargs: dict, module: nn.Module | None, *, warn: bool = True,
                force_outplace: bool = False, name: str = "forward", registry: tuple | None = None,
                signature_of=None, guards=True, allow_frozen_python_state: bool = False, finish,
                through: frozenset = frozenset(), attempt=None, warned: set | None = None) -> Recording:
    """One run of ``fn(*args, **kwargs)``, recording every PyTorch op it calls.

    ``registry`` shares submodule method graphs between the methods of one trace_module;
    ``signature_of`` is the callable whose parameter names name the inputs (default ``fn``);
    ``guards`` (True, "shapes" or False) says which guards the trace keeps (see docs/DESIGN.md);
    ``allow_frozen_python_state`` turns trace/python_state.py's refusals into warnings;
    ``finish(graph)`` runs on each graph this recording made, once (the caller passes
    passes.pipeline.run_trace_pipeline: passes sit above trace/, so trace/ does not import them);
    ``through``: submodule paths whose calls are traced through in place (trace/attempts.py); ``attempt``: the
    caller-visible state before the run (attempts.Attempt); ``warned``: the warnings already given by an earlier run.
    """
    check_policy(guards)
    ledger = Ledger(emit_warnings=warn, warned=warned)
    tracer = Tracer(module, ledger, force_outplace, registry)
    tracer.guards.policy = guards
    tracer.through = through
    known = {id(g) for methods in tracer.methods.values() for g in methods.values()}   # shared, already finished
    graph = Graph(name=name, module_type=type(module).__name__ if module is not None else "",
                  training=module.training if module is not None else None)
    frame = Frame(graph, module, "", None)
    tracer.frames.append(frame)
    args, kwargs = _distinct_inputs(args, kwargs, module)
    bind_inputs(tracer, frame, args, kwargs, signature_of or fn)
    boundary.refuse_unguardable_inputs(args, kwargs)
    global_hooks.refuse_backward_hooks()
    if module is not None:
        _refuse_uninitialized(module)
        check_backward_hooks(module, "")
        for path, m in module.named_modules():
            check_backward_hooks(m, path)
        ledger.add("training", "the module's training flag", None, module.training)
    tracer.python_state = watch = python_state.PythonStateWatch(
        module, allow_frozen_python_state, attempt.python if attempt is not None else None)
    watch.rewrites = getattr(attempt, "expected_rewrites", None)   # to be written again (trace/rewrites.py)
    if attempt is not None:   # what the run drew and which attributes it wrote first (trace/attempts.py)
        attempt.ledger, attempt.watch, attempt.outside_writes = ledger, watch, tracer.outside_writes
        attempt.written_storages = tracer.written_storages
        attempt.draws = tracer.draws
    watch.outer = outer_state.OuterState()
    args, kwargs = input_keys.watch(args, kwargs, graph.param_names)   # dicts whose key set forward reads
    watch.outer.watch_inputs(args, kwargs, signature_of or fn)
    key_reads: dict = {}
    installed = first_access.install(module)   # which comes first, a read or a write of an attribute
    with _tracing_state(tracer):
        input_keys.arm(args, kwargs, key_reads)
        try:
            with frame_returns.watching(tracer.guards.scanner, watch.outer):   # subscripts after a frame's last event
                result = fn(*args, **kwargs)
        finally:
            first_access.remove(installed)
        input_keys.arm(args, kwargs, None)
        graph.grad_exit = tracer.grad_state.exit   # a bare set_grad_enabled(b): the program leaves the caller so too
        graph.exact_keys = tuple(sorted(key_reads.items()))
        with torch._C.DisableTorchFunction():
            watch.finish(ledger)
            bind_outputs(tracer, frame, result)
    if module is not None:
        module_flags.add_guards(tracer, graph)
    if guards is not False:   # plain data in globals, settings modules, os.environ and config objects the modules
        global_reads.add_guards(watch.outer, graph, allow_frozen_python_state, ledger, module, fn)   # or globals hold
        global_tensors.add_checks(watch.outer, graph, allow_frozen_python_state)   # module-level tensors, by identity
        attribute_tensors.add_checks(tracer, graph, module, allow_frozen_python_state)   # and tensor attributes
        callable_attrs.add_checks(watch.outer, graph, module, allow_frozen_python_state)   # and function attributes
        module_config.add_checks(graph, module, allow_frozen_python_state)   # torch's / libraries' module settings
    recorded = [g for methods in tracer.methods.values() for g in methods.values() if id(g) not in known]
    for g in recorded + [graph]:   # submodule graphs made by this recording, then the method's own
        finish(g)
    rec = Recording(graph, tracer.methods, ledger, result, [(m, key) for _, m, key in getattr(watch, "lazy", ())])
    rec.escaped = tracer.finished.escaped   # escapes the traced code caught (trace/attempts.py)
    return rec
