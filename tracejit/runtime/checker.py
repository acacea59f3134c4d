"""The checker: compare a traced program with eager, and a retrace with the trace.

For each check input it runs the original and the traced program (the same
private random stream, ``private_rng``; module buffers restored after each run), compares outputs with
``check_tolerance`` as rtol and atol, and retraces to compare graphs. On a
divergence it names the first diverging operation and its source line.
"""
from __future__ import annotations

import difflib

import torch

from ..codegen.python import compile_function, generate
from ..errors import TracingCheckError
from ..ir import GUARD, Graph, format_graph
from ..ir.printer import Namer, format_node
from ..passes.inline import inline_calls
from ..pytree import flatten, unflatten
from ..trace.patches import quiet_warnings
from ..trace.source import warn_at
from . import private_rng
from .state import ModuleState as _State


def _clone(obj):
    """A copy of the inputs (a run may mutate them); a tensor passed twice is cloned once."""
    leaves, spec = flatten(obj)
    memo: dict[int, torch.Tensor] = {}
    out = []
    for x in leaves:
        if isinstance(x, torch.Tensor):
            if id(x) not in memo:
                memo[id(x)] = x.clone()
            x = memo[id(x)]
        out.append(x)
    return unflatten(spec, out)


def check_trace(traced_method, original, module, checks, tol: float, retrace) -> None:
    graph: Graph = traced_method.graph
    flat = inline_calls(graph)
    nondet = [n for n in flat.nodes if n.attrs.get("nondeterministic")]
    if nondet:
        where = ", ".join(f"{n.op} at {n.source}" for n in nondet[:5])
        text = (f"Trace had nondeterministic nodes: {where}. Outputs of the traced program are not compared "
                "with eager (did you forget to call .eval() on your model?)")
        warn_at(text, nondet[0].source, stacklevel=4)
    grad_mode = _grad_mode_for_checks(flat)
    for i, (args, kwargs) in enumerate(checks):
        rng = private_rng.for_graph(flat)   # never the global generator: other threads draw from it
        state = _State(module, rng)
        with grad_mode(), rng:
            expected = original(*_clone(args), **_clone(kwargs))
            state.restore()
            try:
                actual = _without_retrace(traced_method)(*_clone(args), **_clone(kwargs))
                failure = None
            except Exception as e:  # the trace does not fit these inputs: report it as a check failure
                failure = e
            state.restore()
        with quiet_warnings(), rng:   # this thread's warnings only (catch_warnings is process-wide)
            with grad_mode():
                other = retrace(original, _clone(args), _clone(kwargs))
            state.restore()
        diff = graph_diff(flat, inline_calls(other))
        if failure is not None:
            problem = (f"encountered an exception while running the trace with test inputs: the traced program "
                       f"fails on these inputs where eager runs: {type(failure).__name__}: {failure}")
        else:
            problem = None if nondet else compare(expected, actual, tol)
        if nondet and failure is None:
            _warn_nondeterministic_mismatch(compare(expected, actual, tol), nondet[0].source)
        if problem is None and not diff:
            continue
        label = "the example inputs" if i == 0 else f"check input #{i}"
        first = None
        if problem is not None and not diff:
            with rng:
                first = first_divergence(flat, inline_calls(other), module, args, kwargs, tol, state)
        elif diff:
            first = first_structural_difference(inline_calls(graph), inline_calls(other))
        msg = [f"Tracing failed sanity checks! Trace check failed on {label}."]
        if problem is not None:
            msg.append(problem)
        if first is not None:
            msg.append(f"First diverging operation: {first}")
        if diff:
            msg.append("ERROR: Graphs differed across invocations! The graph traced on these inputs differs "
                       "from the trace:\n" + diff)
        raise TracingCheckError("\n".join(msg), graph_diff=diff) from failure


def _grad_mode_for_checks(flat):
    """The checks run without grad, unless the trace read the grad mode (a ``state`` guard on it): then in
    the mode the trace was made in, so the guard holds where it held while tracing."""
    reads_grad = any(n.op == GUARD and n.attrs.get("kind") == "state" and (
        "grad_enabled" in n.attrs["test"] or "inference_mode" in n.attrs["test"]) for n in flat.nodes)
    if not reads_grad:
        return torch.no_grad
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
    return (lambda: torch.inference_mode()) if inference else (lambda: torch.set_grad_enabled(grad))


def _warn_nondeterministic_mismatch(problem: str | None, src) -> None:
    """A trace with random ops is not failed for differing outputs; the difference is still reported."""
    if problem is None:
        return
    warn_at(f"{problem} (expected here: the trace has nondeterministic nodes)", src, stacklevel=4)


def _without_retrace(traced_method):
    """The checker reports a failed guard; it does not make a specialization of the checked program."""
    run = getattr(traced_method, "_run", None)
    return traced_method if run is None else (lambda *a, **k: run(a, k))


def compare(expected, actual, tol: float) -> str | None:
    e_leaves, e_spec = flatten(expected)
    a_leaves, a_spec = flatten(actual)
    if len(e_leaves) != len(a_leaves):
        return f"The traced program returns {len(a_leaves)} values where eager returns {len(e_leaves)}."
    for k, (e, a) in enumerate(zip(e_leaves, a_leaves)):
        if isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor) and (e.is_nested or a.is_nested):
            if e.is_nested != a.is_nested:
                return f"Output nr {k + 1}. of the traced function is{'' if a.is_nested else ' not'} a nested tensor"
            inner = compare(list(e.unbind()), list(a.unbind()), tol)
            if inner is not None:
                return f"Output nr {k + 1}. (a nested tensor) does not match: {inner}"
        elif isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor):
            if e.shape != a.shape:
                return (f"Output nr {k + 1}. of the traced function does not match the corresponding output of "
                        f"the Python function: shape {tuple(a.shape)} in the traced program, {tuple(e.shape)} in eager.")
            if not torch.allclose(a.double() if a.is_floating_point() else a.to(e.dtype),
                                  e.double() if e.is_floating_point() else e, rtol=tol, atol=tol, equal_nan=True):
                abs_err, rel_err = _errors(e, a)
                return (f"Output nr {k + 1}. of the traced function does not match the corresponding output "
                        f"of the Python function: max absolute error {abs_err:.3g}, max relative "
                        f"error {rel_err:.3g} (tolerance {tol:g}).")
        elif e != a and not (isinstance(e, torch.Tensor) or isinstance(a, torch.Tensor)):
            return f"Output {k} is {a!r} in the traced program and {e!r} in eager."
    return None


def _errors(e, a):
    e = e.detach().double()
    a = a.detach().double()
    d = (e - a).abs()
    abs_err = float(d.max()) if d.numel() else 0.0
    rel = d / e.abs().clamp_min(1e-12)
    rel_err = float(rel.max()) if rel.numel() else 0.0
    return abs_err, rel_err


def graph_diff(a: Graph, b: Graph) -> str:
    ta = format_graph(a, with_source=False, with_types=False)
    tb = format_graph(b, with_source=False, with_types=False)
    if ta == tb:
        return ""
    lines = difflib.unified_diff(ta.splitlines(), tb.splitlines(), "trace", "retrace on check input", lineterm="", n=1)
    out = list(lines)
    return "\n".join(out[:40] + (["..."] if len(out) > 40 else []))


def first_structural_difference(a: Graph, b: Graph) -> str | None:
    na, nb = Namer(a), Namer(b)
    ops = [n for n in a.nodes if n.op != "tracejit::guard"], [n for n in b.nodes if n.op != "tracejit::guard"]
    # name the first differing op; a guard only when the ops agree
    return _first_difference(*ops, na, nb) or _first_difference(a.nodes, b.nodes, na, nb)


def _first_difference(a_nodes, b_nodes, na, nb) -> str | None:
    for x, y in zip(a_nodes, b_nodes):
        if format_node(x, na, False) != format_node(y, nb, False):
            return f"{x.op} at {x.source} (retrace records {y.op} at {y.source})"
    if len(a_nodes) > len(b_nodes):
        extra = a_nodes[len(b_nodes)]
        return f"{extra.op} at {extra.source} (the retrace does not record it)"
    if len(b_nodes) > len(a_nodes):
        extra = b_nodes[len(a_nodes)]
        return f"{extra.op} at {extra.source} (recorded by the retrace, missing from the trace)"
    return None


def _run_observed(graph: Graph, self_obj, args, kwargs):
    seen: dict[int, tuple] = {}
    src, globs = generate(graph, "observed", guards=False, observe=True, budget=getattr(graph, "call_budget", None))
    globs["_observe"] = lambda i, outs: seen.__setitem__(i, outs)
    fn = compile_function(src, "observed", globs, "checker")
    fn(self_obj, *_clone(args), **_clone(kwargs))
    return seen


def first_divergence(flat: Graph, other: Graph, module, args, kwargs, tol, state) -> str | None:
    """Run both flat graphs node by node on the same inputs; name the first node whose outputs differ."""
    try:
        with torch.no_grad():
            a = _run_observed(flat, module, args, kwargs)
            state.restore()
            b = _run_observed(other, module, args, kwargs)
            state.restore()
    except Exception:  # the observed run is only a diagnostic
        return None
    for i, node in enumerate(flat.nodes):
        if i not in a or i not in b:
            continue
        for x, y in zip(a[i], b[i]):
            if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
                if x.shape != y.shape or not torch.allclose(x.double(), y.double(), rtol=tol, atol=tol,
                                                            equal_nan=True):
                    return f"{node.op} at {node.source}"
            elif x != y:
                return f"{node.op} at {node.source}"
    return None
