"""The differential harness: one case, run under torch.jit.trace and tracejit.trace, compared as a user sees it.

A ``Case`` names what is traced (a function, or a factory of a module), the example inputs, and NEW
inputs to call the traced program with. ``observe(case, impl)`` traces with one implementation and
records what a user observes: the exception class at trace time, the TracerWarnings (count and key
phrases), and for each new input the result or the exception class, the in-place effects on the
caller's tensors and on the module's buffers, and the gradients. ``compare(case)`` runs both and
asserts tracejit's observations match torch's, or, where the case is a listed deliberate difference
(``case.deliberate`` names its entry in docs/COMPAT.md), that tracejit gives eager's answer
(or a GuardError where torch returns a stale result).
"""
from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any, Callable

import torch
from torch import nn

import tracejit
from tracejit.pytree import flatten

TORCH_WARNING = torch.jit.TracerWarning

# phrases users filter TracerWarnings on; each must be seen as often under tracejit as under torch
KEY_PHRASES = ("a Python integer", "a Python boolean", "a Python float", "a Python number", "a Python list",
               "a NumPy array", "Iterating over", "Encountering a list at the output",
               "Output nr", "Trace had nondeterministic nodes")


@dataclasses.dataclass
class Case:
    name: str
    target: Callable                   # a function, or a zero-argument factory of an nn.Module (module=True)
    example: Any                       # example_inputs as passed to trace (a tensor, a tuple, a list, ...)
    new: list = dataclasses.field(default_factory=list)   # new inputs: each a tuple of arguments
    module: bool = False
    trace_kwargs: dict = dataclasses.field(default_factory=dict)
    call_kwargs: list | None = None    # keyword arguments for each new call (same length as new)
    grad: bool = False                 # compare gradients of the float inputs (and parameters)
    deliberate: str | None = None      # key of the docs/COMPAT.md entry when tracejit differs on purpose
    moves: bool = True                 # the new inputs change the eager output (checked by a test)
    source: str = ""                   # where the pattern comes from
    refuses: type | None = None        # deliberate: tracejit raises this at trace time where torch's program is wrong

    def __str__(self) -> str:
        return self.name


@dataclasses.dataclass
class Observed:
    trace_error: type | None = None
    trace_message: str = ""
    warnings: list = dataclasses.field(default_factory=list)
    calls: list = dataclasses.field(default_factory=list)   # per new input: ("ok", out, mutated, grads) | ("err", cls, msg)


def _clone(obj):
    leaves, spec = flatten(obj)
    from tracejit.pytree import unflatten
    memo: dict = {}
    out = []
    for x in leaves:
        if isinstance(x, torch.Tensor):
            if id(x) not in memo:
                memo[id(x)] = x.detach().clone()
            x = memo[id(x)]
        out.append(x)
    return unflatten(spec, out)


def _float_leaves(obj) -> list:
    leaves, _ = flatten(obj)
    seen, out = set(), []
    for x in leaves:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and id(x) not in seen:
            seen.add(id(x))
            out.append(x)
    return out


def example_of(case: Case, target):
    """The example inputs for one run (a case may compute them from the module: ``lambda m: m.x``)."""
    if callable(case.example):
        return case.example(target)
    return _clone(case.example) if case.example is not None else None


def fresh_target(case: Case, seed: int = 0):
    """The traced object for one run: a new module (same seed, same weights) or the function itself."""
    if not case.module:
        return case.target
    torch.manual_seed(seed)
    return case.target()


def _as_tuple(example) -> tuple:
    if isinstance(example, tuple) and not hasattr(type(example), "_fields"):
        return example
    return tuple(example) if isinstance(example, list) else (example,)


def _run_call(fn, module, args, kwargs, grad: bool, keep: bool = False):
    """Call ``fn`` on copies of ``args``; return ("ok", output, inputs after, buffers after, grads) or ("err", ...)."""
    if not keep:
        args, kwargs = _clone(args), _clone(kwargs)
    if grad:
        for t in _float_leaves((args, kwargs)):
            t.requires_grad_(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn(*args, **kwargs)
            grads = None
            if grad:
                floats = [o for o in _float_leaves(out) if o.requires_grad]
                if floats:
                    sum(o.sum() for o in floats).backward()
                params = list(module.parameters()) if module is not None else []
                grads = [None if t.grad is None else t.grad.clone() for t in _float_leaves((args, kwargs)) + params]
                for p in params:
                    p.grad = None
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return ("err", type(e), str(e))
    buffers = [b.clone() for b in module.buffers()] if module is not None else []
    return ("ok", _detached(out), _detached((args, kwargs)), buffers, grads)


def _detached(obj):
    leaves, spec = flatten(obj)
    from tracejit.pytree import unflatten
    return unflatten(spec, [x.detach().clone() if isinstance(x, torch.Tensor) and not x.is_nested
                            else x for x in leaves])


def _calls(case: Case):
    kw = case.call_kwargs or [{} for _ in case.new]
    return list(zip(case.new, kw))


def observe(case: Case, impl: str) -> Observed:
    """Trace ``case`` with ``impl`` ("torch", "tracejit" or "eager") and call it on the new inputs."""
    target = fresh_target(case)
    obs = Observed()
    if impl == "eager":
        traced = target
        if case.module:   # tracing runs the module once on the example (buffers it updates stay updated)
            example = example_of(case, target)
            kwargs = case.trace_kwargs.get("example_kwarg_inputs") or {}
            _run_call(target, None, _as_tuple(example) if example is not None else (), kwargs, False, keep=True)
    else:
        trace = torch.jit.trace if impl == "torch" else tracejit.trace
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            TORCH_WARNING.ignore_lib_warnings()   # torch.jit installs this filter at import, as users have it
            try:
                traced = trace(target, example_of(case, target), **case.trace_kwargs)
            except Exception as e:  # noqa: BLE001
                obs.trace_error, obs.trace_message = type(e), str(e)
                traced = None
        obs.warnings = [str(w.message) for w in caught if issubclass(w.category, TORCH_WARNING)]
        if traced is None:
            return obs
    module = traced if isinstance(traced, nn.Module) else None
    for args, kwargs in _calls(case):
        obs.calls.append(_run_call(traced, module, args, kwargs, case.grad))
    return obs


def phrases_seen(messages: list[str]) -> set:
    return {p for p in KEY_PHRASES if any(p in m for m in messages)}


def first_trace_warnings(case: Case) -> list[str]:
    """torch's TracerWarnings from the trace alone: its checker traces again and repeats every warning
    (tracejit's checker retraces silently), so counts are compared without torch's check run."""
    if case.trace_kwargs.get("check_trace") is False:
        return observe(case, "torch").warnings
    quiet = dataclasses.replace(case, trace_kwargs={**case.trace_kwargs, "check_trace": False}, new=[])
    return [m for m in observe(quiet, "torch").warnings
            if not any(p in m for p in ("Output nr", "Trace had nondeterministic nodes"))]


def same(a, b) -> bool:
    """Two observed values are equal (tensors: same shape and dtype, close values)."""
    la, sa = flatten(a)
    lb, sb = flatten(b)
    if repr(sa) != repr(sb) or len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                return False
            if x.is_nested or y.is_nested:
                if not (x.is_nested and y.is_nested and same(list(x.unbind()), list(y.unbind()))):
                    return False
                continue
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if not torch.allclose(x.double(), y.double(), rtol=1e-4, atol=1e-5, equal_nan=True) \
                    if x.dtype.is_floating_point or x.dtype.is_complex else not torch.equal(x, y):
                return False
        elif x != y and not (x is None and y is None):
            return False
    return True


def same_call(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "err":
        return issubclass(a[1], b[1]) or issubclass(b[1], a[1])
    return all(same(x, y) for x, y in zip(a[1:], b[1:]))


def compare(case: Case) -> tuple[Observed, Observed]:
    """Assert that tracejit behaves as torch.jit.trace on ``case`` (or as eager, when listed as deliberate)."""
    ref = observe(case, "torch")
    got = observe(case, "tracejit")
    eager = observe(case, "eager")
    where = f"case {case.name!r}"
    if ref.trace_error is not None:
        if got.trace_error is not None:
            assert issubclass(got.trace_error, ref.trace_error), \
                f"{where}: torch raises {ref.trace_error.__name__} ({ref.trace_message[:200]}), tracejit raises " \
                f"{got.trace_error.__name__} ({got.trace_message[:200]}) which is not a subclass"
            return ref, got
        assert case.deliberate, f"{where}: torch raises {ref.trace_error.__name__} ({ref.trace_message[:200]}) " \
                                "and tracejit traces it: list the difference in docs/COMPAT.md"
        _assert_eager(case, got, eager)
        return ref, got
    if case.refuses is not None:
        assert case.deliberate and got.trace_error is not None and issubclass(got.trace_error, case.refuses), \
            f"{where}: tracejit should refuse with {case.refuses.__name__}; got {got.trace_error}"
        assert any(not same_call(r, e) for r, e in zip(ref.calls, eager.calls)), \
            f"{where}: tracejit refuses, but torch's traced program gives eager's answers"
        return ref, got
    assert got.trace_error is None, \
        f"{where}: torch traces it, tracejit raises {got.trace_error.__name__}: {got.trace_message[:300]}"
    if case.deliberate:
        _assert_eager(case, got, eager)
        return ref, got
    assert phrases_seen(got.warnings) == phrases_seen(ref.warnings), \
        f"{where}: TracerWarning phrases differ\ntorch: {ref.warnings}\ntracejit: {got.warnings}"
    first = first_trace_warnings(case) if ref.warnings else []
    assert len(got.warnings) == len(first), \
        f"{where}: {len(first)} TracerWarnings under torch, {len(got.warnings)} under tracejit\n" \
        f"torch: {first}\ntracejit: {got.warnings}"
    for i, (r, g) in enumerate(zip(ref.calls, got.calls)):
        assert same_call(g, r), f"{where}, new input #{i}: torch gives {_show(r)}, tracejit gives {_show(g)}"
    return ref, got


def _assert_eager(case: Case, got: Observed, eager: Observed) -> None:
    """A deliberate difference: tracejit gives eager's answer on every new input, or a GuardError."""
    for i, (e, g) in enumerate(zip(eager.calls, got.calls)):
        if g[0] == "err" and issubclass(g[1], tracejit.GuardError):
            continue
        assert same_call(g, e), f"case {case.name!r}, new input #{i}: eager gives {_show(e)}, tracejit {_show(g)}"


def _show(call) -> str:
    if call[0] == "err":
        return f"{call[1].__name__}: {call[2][:200]}"
    return repr(call[1])[:300]


def eager_moves(case: Case) -> bool:
    """The new inputs change the eager output (so a stale trace could not pass the comparison)."""
    target = fresh_target(case)
    module = target if isinstance(target, nn.Module) else None
    example = example_of(case, target)
    base_args = _as_tuple(example)
    base = _run_call(target, module, base_args, case.trace_kwargs.get("example_kwarg_inputs") or {}, False) \
        if example is not None else _run_call(target, module, (), case.trace_kwargs.get(
            "example_kwarg_inputs") or {}, False)
    outs = [_run_call(target, module, a, k, False) for a, k in _calls(case)]
    return any(not same_call(o, base) for o in outs)


def module_copy(module: nn.Module) -> Callable[[], nn.Module]:
    """A factory returning copies of ``module`` (for cases written around one instance)."""
    return lambda: copy.deepcopy(module)


class Inputs:
    """Seeded makers of example and new inputs, one per case file (same seed, same tensors)."""

    def __init__(self, seed: int):
        self.g = torch.Generator().manual_seed(seed)

    def R(self, *shape):
        return torch.randn(*shape, generator=self.g)

    def P(self, *shape):
        return torch.rand(*shape, generator=self.g) + 0.1

    def I(self, high, *shape):
        return torch.randint(0, high, shape, generator=self.g)

    def new2(self, *shapes_list):
        """Two new inputs per shape set: same rank, other sizes and values."""
        return [tuple(self.R(*s) for s in shapes) for shapes in shapes_list]

    def elementwise(self, name, fn, src="torch docs"):
        return Case(name, fn, (self.R(3, 4),), self.new2([(5, 4)], [(2, 7)]), source=src, grad=True)
