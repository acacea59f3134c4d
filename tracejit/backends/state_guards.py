"""The guards on Python and torch state of a traced graph, checked on their own: a function of no argument.

A guard of kind ``global`` (a module global, a config object's attribute, torch's global module hooks) or
``state`` (``torch.is_grad_enabled()``, a ``torch.backends`` flag) reads no argument of the call. A backend that
does not run the program's own code on every call (an exported ONNX model, a CUDA graph replay) still checks them
on every call, before it runs anything: ``state_check(graph, label, display)`` compiles them into one method
that raises GuardError naming the first guard that fails, as the program would (each read once: ``distinct``).

>>> import torch, tracejit
>>> def double_with_grad(x):
...     return x * 2 if torch.is_grad_enabled() else x
>>> traced = tracejit.trace(double_with_grad, (torch.ones(2),))
>>> check = state_check(traced.graph, "doc_state_guards", "double_with_grad")
>>> check(None)        # grad mode is what the trace read: nothing raised, an empty result
()
>>> with torch.no_grad():
...     check(None)
Traceback (most recent call last):
    ...
tracejit.errors.GuardError: ...

A compiled program's own graph (``spec.fn.run_graph``) also holds the checks of the attributes it read (a config
object's, a module's plain attributes): backends/cuda_graphs.py passes that one.
"""
from __future__ import annotations

import copy

from .. import pytree
from ..ir import GUARD
from ..passes.inline import inline_calls
from ..runtime.method_compiler import compile_method


def python_state(node) -> bool:
    """Is ``node`` a guard on Python or torch state (kind ``global``: a module global, a config attribute, torch's
    global hooks; kind ``state``: ``torch.is_grad_enabled()``, ``torch.get_default_dtype()``, ...)? An exported
    model holds the traced answer; the program checks them on every call (``state_check``)."""
    return node.op == GUARD and node.attrs.get("kind") in ("global", "state")


def distinct(guards) -> list:
    """The state guards, each read once: every layer of torchvision's ViT reads ``torch.is_autocast_enabled()`` and
    ``torch.backends.mha.get_fastpath_enabled()`` (24 reads in ViT-B/16, ~0.4 us each), and a state check runs all
    of them before the run, where one read answers for all (the first one's line is named)."""
    seen, kept = set(), []
    for guard in guards:
        attrs = guard.attrs
        where = (id(attrs["space"]) if attrs.get("space") is not None else None, attrs.get("module"), attrs.get("owner"))
        key = (attrs.get("kind"), attrs.get("test"), where, attrs.get("name"), repr(attrs.get("expected")))
        if key not in seen:
            seen.add(key)
            kept.append(guard)
    return kept


def state_graph(flat_graph):
    """A copy of ``flat_graph`` (inlined: no calls) holding its state guards alone, a function of no argument, or
    None where it has none."""
    state = distinct(n for n in flat_graph.nodes if python_state(n))
    if not state:
        return None
    graph = copy.copy(flat_graph)
    graph.nodes, graph.outputs, graph.out_spec = state, [], pytree.flatten(())[1]
    # they read no argument: a function of none (no per-argument type checks; ``check(None)``)
    graph.inputs, graph.input_leaves, graph.arg_names = [], [], []
    graph.in_spec, graph.param_names = pytree.flatten(((), {}))[1], []
    return graph


def state_check(graph, label: str, display: str):
    """The compiled check of ``graph``'s state guards and of the Python state it holds beside them (``check(None)``
    raises GuardError where one fails), or None where it has neither. ``label`` names the generated code,
    ``display`` the method in its errors."""
    checked = state_graph(inline_calls(graph))
    compiled = None if checked is None else compile_method(checked, "forward", label, guards=True, display=display)
    return with_memory_checks(compiled, getattr(graph, "memory_checks", None), display)


def with_memory_checks(check, memory, display: str):
    """``check`` (a compiled state check, or None) preceded by ``memory``, the checks a graph holds beside its nodes
    (``Graph.memory_checks``: the scalar settings of torch's and libraries' modules such as ``LeakyReLU``'s
    ``negative_slope`` or ``Dropout``'s ``p``, module-level tensors by identity: trace/module_config.py,
    trace/global_tensors.py); the program itself runs them before every call (runtime/traced.py), and so must a
    backend that does not run the program. None where there is neither."""
    if memory is None:
        return check

    def checked(_=None):
        memory.check(display)   # IdentityChecks: GuardError naming the first that changed
        return () if check is None else check(None)
    return checked
