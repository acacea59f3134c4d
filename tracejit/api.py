"""The public entry points: trace() and trace_module(), with torch.jit's signatures."""
from __future__ import annotations

import inspect
import types
import warnings

import torch
from torch import nn

from .runtime.checker import check_trace as _run_checker
from .runtime.private_rng import PrivateRandomness
from .runtime.state import ModuleState
from .runtime import specialize
from .runtime.lending import (float64_copy, hook_snapshot, lend_tensors, like_module, one_at_a_time,
                               submodule_or_none, swap_back, swap_hooks, with_later_hooks)
from .program import Program, of_function, of_module
from .runtime.assemble import compile_program
from .runtime.traced import compile_methods
from .errors import ArgumentTypeError, TraceError, TracerWarning
from .kwarg_examples import as_kwarg_dict, kwarg_examples
from .pytree import KEYED
from .passes.pipeline import run_trace_pipeline
from .trace.api import lazy_setups_undone, record
from .trace.rewrites import held as rewrites_held
from .trace import module_config
from .trace.source import caller_stacklevel
from .trace import attempts as _attempts

_attempts.use_private_randomness(PrivateRandomness)   # a second run's draws (trace/attempts.py): a higher layer's class


def _as_args(example_inputs, fn=None) -> tuple:
    """Example inputs as positional arguments, as torch.jit does: a tensor or a dict is the one
    argument; a tuple or a list holds the arguments; another object is one argument.

    A list or a namedtuple whose items do not fit ``fn``'s parameters while the whole does (a
    function of one list, or of one namedtuple) is the one argument: torch.jit refuses those.
    """
    if isinstance(example_inputs, (torch.Tensor, dict)):
        return (example_inputs,)
    if isinstance(example_inputs, tuple) and not hasattr(type(example_inputs), "_fields"):
        return example_inputs
    if isinstance(example_inputs, (list, tuple)):
        spread = tuple(example_inputs)
        if fn is not None and not _fits(fn, spread) and _fits(fn, (example_inputs,)):
            return (example_inputs,)
        return spread
    return (example_inputs,)


def _fits(fn, args: tuple) -> bool:
    """Do ``args`` bind to ``fn``'s parameters? (True when the signature cannot be read.)"""
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-05,
          strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None,
          example_kwarg_inputs=None, _store_inputs=True, guards=True, specialize_for=None,
          allow_frozen_python_state=False):
    """Trace a function or module into a program that re-runs its PyTorch ops on new inputs.

    Same signature and behaviour as torch.jit's ``trace``:

    - ``func``: a function, an ``nn.Module`` (its ``forward`` is traced) or a module's bound
      method (traced as the returned module's ``forward``).
    - ``example_inputs``: a tensor, a dict (one argument) or a tuple or list of arguments
      (nested tuples, lists, dicts and namedtuples of tensors inside are kept as they are);
      ``example_kwarg_inputs``: a dict of keyword arguments; the traced program takes them by
      keyword or by position, in the order of the function's parameters.
    - ``check_trace``: run the traced program and the original on the example inputs and on
      each of ``check_inputs`` (tuples of arguments), retrace on them and compare; raises
      ``TracingCheckError`` on a divergence beyond ``check_tolerance`` (rtol and atol).
    - ``strict``: when True, a dict output is an error (pass ``strict=False``) and a list
      output warns; when False both are returned as they are.
    - ``_force_outplace``: record in-place ops as their out-of-place forms.
    - ``optimize`` is deprecated and ignored (warns, as torch does); ``_module_class`` and
      ``_compilation_unit`` are accepted and ignored (they name TorchScript internals);
      ``_store_inputs``: keep the example inputs on the result (``traced.example_inputs``).
    - ``guards``: True (default) checks at each call every value the trace relied on (sizes,
      ranks, values read out of tensors) and retraces or raises GuardError when one differs;
      "shapes" keeps only the checks that need no device sync; False switches them off (the
      program then silently reuses the traced values, as torch.jit's trace does).
    - ``specialize_for``: more input sets (each in the form of ``example_inputs``, or a dict of
      keyword arguments when tracing from ``example_kwarg_inputs``): each one whose guards the
      traces made so far fail is traced too, ahead of time. The result (and a file saved from it)
      then holds one specialization per kind of input and chooses per call, with no retrace.
    - ``allow_frozen_python_state``: forward changed Python state of the model (``self.step += 1``,
      a buffer reassigned, a list cache), drew from ``random`` / ``numpy.random``, read a clock,
      seeded torch or caught an op's exception: by default a TraceError naming the line (the
      program could not replay or check it); True accepts the frozen outcome with a TracerWarning
      and a ``python_state`` ledger entry (docs/CAPTURE.md).

    Returns a ``TracedFunction`` for a plain function, a ``TracedModule`` otherwise.

    >>> import torch, tracejit
    >>> def foo(x, y):
    ...     return 2 * x + y
    >>> traced_foo = tracejit.trace(foo, (torch.rand(3), torch.rand(3)))
    >>> traced_foo(torch.ones(5), torch.zeros(5))
    tensor([2., 2., 2., 2., 2.])
    """
    if optimize is not None:
        warnings.warn("`optimize` is deprecated and has no effect.", DeprecationWarning, stacklevel=2)
    allow_frozen = bool(allow_frozen_python_state)
    common = dict(check_trace=check_trace, check_tolerance=check_tolerance, strict=strict,
                  _force_outplace=_force_outplace, _store_inputs=_store_inputs, guards=guards,
                  allow_frozen=allow_frozen)
    if example_kwarg_inputs is not None:
        target = func.forward if isinstance(func, nn.Module) else func
        example_kwarg_inputs = kwarg_examples(example_kwarg_inputs, target)
    if isinstance(func, nn.Module):
        inputs = example_kwarg_inputs if example_kwarg_inputs is not None else example_inputs
        checks = [c for c in check_inputs] if check_inputs is not None else None
        traced = _trace_methods(func, {"forward": inputs}, {"forward": "forward"}, checks,
                                kwarg=example_kwarg_inputs is not None, **common)
        return _specialize_ahead(traced, specialize_for, example_kwarg_inputs is not None, func.forward, func)
    if isinstance(func, types.MethodType) and isinstance(func.__self__, nn.Module):
        inputs = example_kwarg_inputs if example_kwarg_inputs is not None else example_inputs
        checks = [c for c in check_inputs] if check_inputs is not None else None
        traced = _trace_methods(func.__self__, {"forward": inputs}, {"forward": func.__name__}, checks,
                                kwarg=example_kwarg_inputs is not None, via_call=False, **common)
        return _specialize_ahead(traced, specialize_for, example_kwarg_inputs is not None, func, func.__self__)
    if not callable(func):
        raise TypeError(f"tracejit.trace expects a function or an nn.Module to trace; got {type(func).__name__} "
                        f"{func!r:.60}")
    if example_inputs is None and example_kwarg_inputs is None:
        raise ValueError("tracejit.trace needs example inputs: pass example_inputs (a tensor or a tuple of "
                         "arguments) or example_kwarg_inputs (a dict of keyword arguments)")
    args = _as_args(example_inputs, func) if example_inputs is not None else ()
    kwargs = dict(example_kwarg_inputs or {})
    name = getattr(func, "__name__", type(func).__name__)
    rec = _record(func, args, kwargs, None, name, _force_outplace, guards=guards, allow_frozen=allow_frozen)
    _check_outputs(rec, strict, name)
    traced = compile_program(of_function(name, rec.graph, rec.ledger.entries))
    specialize.enable_for_function(
        traced, lambda a, k: _record(func, a, k, None, name, _force_outplace, warn=False, guards=guards,
                                     allow_frozen=allow_frozen).graph, signature=_signature_or_none(func))
    if _store_inputs:
        traced.example_inputs = (args, kwargs)
    if check_trace:
        checks = [(_as_args(c, func), {}) if not isinstance(c, dict) or kwargs == {} else ((), c)
                  for c in (check_inputs or [])]
        _run_checker(traced, func, None, [(args, kwargs)] + checks, check_tolerance,
                     lambda f, a, k: _record(f, a, k, None, name, _force_outplace, warn=False,
                                             guards=guards, allow_frozen=allow_frozen).graph)
    return _specialize_ahead(traced, specialize_for, bool(kwargs), func, None)


def _specialize_ahead(traced, specialize_for, kwarg: bool, fn, module):
    """``trace(..., specialize_for=[...])``: a specialization for each input set no trace fits yet."""
    if specialize_for is None:
        return traced
    if isinstance(specialize_for, (torch.Tensor, dict)) or not isinstance(specialize_for, (list, tuple)):
        raise ArgumentTypeError(f"specialize_for should be a list of input sets (each like example_inputs); got "
                                f"{type(specialize_for).__name__}")
    spec_set = specialize.sets_of(traced)["forward"]
    for k, inputs in enumerate(specialize_for):
        args, kwargs = _split_inputs(inputs, kwarg, f"specialize_for[{k}]", fn)
        _check_fits(fn, args, kwargs)
        spec_set.prepare(args, kwargs, module=traced if isinstance(traced, nn.Module) else None)
    return traced


def trace_module(mod, inputs, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-05,
                 strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None,
                 example_inputs_is_kwarg=False, _store_inputs=True, guards=True, allow_frozen_python_state=False):
    """Trace several methods of a module into one ``TracedModule`` sharing its parameters.

    ``inputs`` maps method names to example inputs (a tensor, a tuple of arguments, or with
    ``example_inputs_is_kwarg=True`` a dict of keyword arguments); ``check_inputs`` is a list
    of such dicts. The other arguments are as in ``trace``.

    >>> import torch, torch.nn as nn, tracejit
    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.conv = nn.Conv2d(1, 1, 3)
    ...     def forward(self, x):
    ...         return self.conv(x)
    ...     def weighted_kernel_sum(self, weight):
    ...         return weight * self.conv.weight
    >>> n = Net()
    >>> m = tracejit.trace_module(n, {'forward': torch.rand(1, 1, 3, 3),
    ...                               'weighted_kernel_sum': torch.rand(1, 1, 3, 3)})
    >>> m.weighted_kernel_sum(torch.ones(1, 1, 3, 3)).shape
    torch.Size([1, 1, 3, 3])
    """
    if optimize is not None:
        warnings.warn("`optimize` is deprecated and has no effect.", DeprecationWarning, stacklevel=2)
    if not isinstance(mod, nn.Module):
        raise TypeError(f"tracejit.trace_module expects an nn.Module; got {type(mod).__name__}")
    if not isinstance(inputs, dict) or not inputs:
        raise TypeError("tracejit.trace_module expects inputs as a dict of method name -> example inputs, "
                        f"e.g. {{'forward': x}}; got {type(inputs).__name__}")
    return _trace_methods(mod, inputs, {k: k for k in inputs}, check_inputs, kwarg=example_inputs_is_kwarg,
                          check_trace=check_trace, check_tolerance=check_tolerance, strict=strict,
                          _force_outplace=_force_outplace, _store_inputs=_store_inputs, guards=guards,
                          allow_frozen=bool(allow_frozen_python_state))


def _trace_methods(mod, inputs: dict, names: dict, check_inputs, *, kwarg, check_trace, check_tolerance, strict,
                   _force_outplace, _store_inputs, via_call: bool = True, guards=True, allow_frozen=False):
    """Trace ``mod``'s methods: ``inputs`` by installed name, ``names`` maps installed -> original.

    ``forward`` is traced through ``mod(...)`` when ``via_call`` (as torch does), so the module's own
    forward hooks and pre-hooks are part of the trace; other methods are called directly.
    """
    label = type(mod).__name__
    per_method_args = {}
    for installed, example in inputs.items():
        original = names[installed]
        fn = getattr(mod, original, None)
        if fn is None or not callable(fn):
            raise AttributeError(f"{label} has no method {original!r} to trace")
        per_method_args[installed] = _split_inputs(example, kwarg, original, fn)

    def entry(installed):
        original = names[installed]
        bound = getattr(mod, original)
        return (mod if via_call and original == "forward" else bound), bound

    def record_all(per_method, warn: bool) -> dict:
        registry: tuple = ({}, {})   # submodule graphs shared by all methods of this module
        recs = {}
        for installed, (args, kwargs) in per_method.items():
            fn, bound = entry(installed)
            recs[installed] = _record(fn, args, kwargs, mod, installed, _force_outplace, warn=warn,
                                      registry=registry, signature_of=bound, guards=guards,
                                      allow_frozen=allow_frozen)
        return recs

    recordings = record_all(per_method_args, warn=True)
    for installed, rec in recordings.items():
        _check_outputs(rec, strict, f"{label}.{names[installed]}")
    traced = compile_program(_program(mod, recordings, label))
    module_config.remember_settings(traced, mod)   # `traced.drop.p = 0.2` is refused, not ignored
    if _store_inputs:
        traced.example_inputs = per_method_args
    hooks = hook_snapshot(mod)

    def retrace(mode: bool, current, inputs=None) -> dict:
        """A trace of ``mod`` in training mode ``mode`` on ``inputs`` (default: the example inputs),
        as it was traced (its hooks), with the traced module's current parameters and buffers and the hooks the
        original got since (``with_later_hooks``): its Python state is today's too, and a forward that installs
        hooks once and remembers it in an attribute (transformers' output capturing) would otherwise run with the
        flag but without the hooks, and answer what eager does not (an empty ``hidden_states``)."""
        flags = [(m, m.training) for m in mod.modules()]
        lent = lend_tensors(current, mod)
        state = ModuleState(mod)
        merged = with_later_hooks(mod, hooks)
        now = swap_hooks(merged)
        mod.train(mode)
        if current is not None and mode == current.training:   # a guard retrace: each submodule keeps
            for path, m in mod.named_modules():                 # the mode its traced copy is in
                copy = submodule_or_none(current, path)
                if copy is not None:
                    m.training = copy.training
        try:
            with PrivateRandomness():   # draws nothing from the global generator; in the caller's grad mode
                recs = record_all(inputs if inputs is not None else
                                  {k: like_module(v, mod) for k, v in per_method_args.items()}, warn=False)
        finally:
            for m, flag in flags:
                m.training = flag
            swap_back(now, merged)   # the hooks forward registered meanwhile stay (runtime/lending.py)
            state.restore()
            lend_tensors(lent, mod)
        return _compile(recs, label)
    traced._traced_retrace = one_at_a_time(retrace)
    traced._traced_float64 = one_at_a_time(lambda current: float64_copy(current, mod, hooks))
    specialize.enable_for_module(traced, traced._traced_retrace,
                                 {k: _signature_or_none(entry(k)[1]) for k in per_method_args})
    if check_trace:
        for installed, (args, kwargs) in per_method_args.items():
            fn, bound = entry(installed)
            checks = [(args, kwargs)]
            for c in check_inputs or []:
                ex = c.get(installed) if isinstance(c, dict) and installed in c else (c if len(inputs) == 1 else None)
                if ex is not None:
                    checks.append(_split_inputs(ex, kwarg, installed, bound))
            lazy, rewritten = recordings[installed].lazy, recordings[installed].rewritten
            _run_checker(getattr(traced, installed), fn, mod, checks, check_tolerance,
                         lambda f, a, k, lazy=lazy, rewritten=rewritten, installed=installed, bound=bound:
                         _checker_retrace(lazy, rewritten, f, a, k, mod, installed, _force_outplace, bound, guards,
                                          allow_frozen))
    return traced


def _program(mod, recordings: dict, label: str) -> Program:
    """The Program of ``mod``'s traced methods (``recordings``: installed name -> Recording), with the
    graphs of the submodule methods they call."""
    methods: dict = {}
    for rec in recordings.values():
        for path, graphs in rec.methods.items():
            methods.setdefault(path, {}).update(graphs)
    methods.setdefault("", {}).update({k: r.graph for k, r in recordings.items()})
    return of_module(mod, methods, tuple(recordings), (e for r in recordings.values() for e in r.ledger.entries),
                     label)


def _compile(recordings: dict, label: str) -> dict:
    """Compile the graphs of the traced methods of one module and of the submodule methods they call."""
    methods: dict = {}
    for rec in recordings.values():
        for path, graphs in rec.methods.items():
            methods.setdefault(path, {}).update(graphs)
    return compile_methods(methods, {k: r.graph for k, r in recordings.items()}, label)


def _split_inputs(example, kwarg: bool, where: str, fn=None):
    if kwarg:
        if as_kwarg_dict(example) is None:
            raise TypeError(f"example inputs for {where!r} should be a dict of keyword arguments "
                            f"(example_inputs_is_kwarg=True); got {type(example).__name__}")
        return (), (kwarg_examples(example, fn) if fn is not None else dict(as_kwarg_dict(example)))
    if example is None:
        raise ValueError(f"no example inputs given for {where!r}")
    return _as_args(example, fn), {}


def _checker_retrace(lazy, rewritten, fn, args, kwargs, module, name, force_outplace, bound, guards, allow_frozen):
    """The checker's retrace of ``fn``, from the module's state before the trace's lazy set-ups (torchvision's
    ``MultiScaleRoIAlign.scales``, set from None on the first call): the trace recorded that first call's path;
    with the attributes its recorded run wrote again as they were then (trace/rewrites.py: eager's own call may
    write an equal value of another type, Swin's window as an int where a trace writes a 0-d tensor)."""
    with lazy_setups_undone(lazy), rewrites_held(rewritten):
        return _record(fn, args, kwargs, module, name, force_outplace, warn=False, signature_of=bound, guards=guards,
                       allow_frozen=allow_frozen, rewritten=rewritten).graph


def _record(fn, args, kwargs, module, name, force_outplace, warn=True, registry=None, signature_of=None,
            guards=True, allow_frozen=False, rewritten=()):
    _check_fits(signature_of or fn, args, kwargs)
    return record(fn, args, kwargs, module, warn=warn, force_outplace=force_outplace, name=name,
                  registry=registry, signature_of=signature_of, guards=guards,
                  allow_frozen_python_state=allow_frozen, finish=run_trace_pipeline, rewritten=rewritten)


def _signature_or_none(fn):
    """``fn``'s signature (which inputs a call of its trace may leave out); None where it has none."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _check_fits(fn, args, kwargs) -> None:
    """Example inputs that cannot bind to the traced callable's parameters are a TypeError, said plainly."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        what = getattr(fn, "__qualname__", type(fn).__name__)
        raise TypeError(f"the example inputs do not fit {what}{sig}: {e} (got {len(args)} positional "
                        f"argument(s){' and keywords ' + str(sorted(kwargs)) if kwargs else ''})") from None


def _check_outputs(rec, strict: bool, where: str) -> None:
    spec = rec.graph.out_spec
    kinds = _container_kinds(spec)
    if _has_tensor_keys(spec):
        raise TraceError(f"{where} returns a dict subclass keyed by tensors; tracejit traces dict outputs keyed by "
                         "tensors as a dict or an OrderedDict only. "
                         "Return the keys and values as a tuple instead.")
    if ("dict" in kinds or KEYED in kinds) and strict:
        raise RuntimeError(f"Encountering a dict at the output of the tracer might cause the trace to be "
                           f"incorrect: {where} returns a dict. Tracing a dict output is only supported with "
                           "strict=False (the traced program then returns a dict with the same keys); pass "
                           "strict=False to trace() to allow it.")
    if "list" in kinds and strict:
        warnings.warn(f"Encountering a list at the output of the tracer might cause the trace to be incorrect: "
                      f"{where} returns a list; the traced program returns a list of the same length. Pass "
                      "strict=False to silence this warning.", TracerWarning, stacklevel=caller_stacklevel())


def _has_tensor_keys(spec) -> bool:
    if spec.kind == "dict" and any(isinstance(k, torch.Tensor) for k in spec.keys):
        return True
    return any(_has_tensor_keys(c) for c in spec.children)


def _container_kinds(spec) -> set:
    out = {spec.kind}
    for c in spec.children:
        out |= _container_kinds(c)
    return out
