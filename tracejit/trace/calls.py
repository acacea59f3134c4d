"""Submodule calls while tracing: each call of a module of the traced hierarchy
is recorded into a Graph of its own and appears in the caller's graph as one
``tracejit::call_module`` node.
"""
from __future__ import annotations

import contextlib
import inspect

import torch
from torch import nn

from ..errors import BackwardHookError, TraceError
from ..ir import Graph, Node, ScalarType, TensorType, Value, format_graph
from ..pytree import KEYED, flatten, has_kind
from . import grad_mode, opaque, patches, through
from .recorder import Frame, Tracer, internal
from .source import user_location
from .symbolic import TracedInt


def leaf_names(fn, args, kwargs, n_leaves: int) -> tuple[list[str], list[str]]:
    """Readable names from ``fn``'s parameters: one per leaf of ``(args, kwargs)``, one per argument."""
    names: list[str] = []
    tops: list[str] = []
    try:
        params = [p for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_pos = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "args")
    for i, a in enumerate(args):
        base = positional[i] if i < len(positional) else f"{var_pos}_{i}"
        tops.append(base)
        names.extend(_names_for(base, a))
    for k, a in kwargs.items():
        tops.append(k)
        names.extend(_names_for(k, a))
    if len(names) != n_leaves:  # pragma: no cover - defensive
        names = [f"input_{i}" for i in range(n_leaves)]
    return names, tops


def _names_for(base: str, obj) -> list[str]:
    leaves, _ = flatten(obj)
    if len(leaves) == 1 and not isinstance(obj, (tuple, list, dict)):
        return [base]
    return [f"{base}_{i}" for i in range(len(leaves))]


def bind_inputs(tracer: Tracer, frame: Frame, args, kwargs, fn, parent: Frame | None = None,
                traced_through: bool = False):
    """Make graph inputs for the tensor / traced-int leaves of (args, kwargs).

    Returns the values of those leaves in the parent frame (for the call node). ``traced_through``:
    the call is spliced into its caller (trace/through.py), so leaves it cannot flatten are allowed.
    """
    leaves, spec = flatten((tuple(args), dict(kwargs)))
    if parent is None and has_kind(spec, KEYED):
        raise TraceError(f"an input of {_callee_name(frame)} is a dict keyed by tensors: a traced program takes "
                         "inputs keyed by strings, numbers or other constants only. Pass the keys and the values "
                         "as two tuples instead.")
    if not traced_through:
        opaque.check_leaves(leaves, f"an input of {_callee_name(frame)}", user_location(3))
    names, tops = leaf_names(fn, args, kwargs, len(leaves))
    graph = frame.graph
    graph.in_spec = spec
    graph.arg_names = tuple(names)
    graph.param_names = tuple(tops)
    outer = []
    for leaf, name in zip(leaves, names):
        if isinstance(leaf, torch.Tensor):
            pv = tracer.value_of(leaf, parent) if parent is not None else None
            v = graph.add_input(TensorType.of(leaf), hint=name, dynamic=pv.dynamic if pv is not None else True)
            frame.bind(leaf, v)
            graph.input_leaves.append(v)
            outer.append(pv)
        elif isinstance(leaf, TracedInt) and parent is not None and tracer._int_value(leaf, parent) is not None:
            pv = tracer._int_value(leaf, parent)
            v = graph.add_input(ScalarType("int"), hint=name, dynamic=True)
            frame.bind(leaf, v)
            graph.input_leaves.append(v)
            outer.append(pv)
        elif isinstance(leaf, torch._C.Generator) and parent is not None and tracer._int_value(leaf, parent) is not None:
            pv = tracer._int_value(leaf, parent)   # a generator the caller made (trace/rng_record.py)
            v = graph.add_input(ScalarType("generator"), hint=name, dynamic=True)
            frame.bind(leaf, v)
            graph.input_leaves.append(v)
            outer.append(pv)
        else:
            graph.input_leaves.append(_const_leaf(leaf))
    return outer


def _callee_name(frame: Frame) -> str:
    if frame.module is None:
        return "the traced function"
    return f"submodule '{frame.path}' ({type(frame.module).__name__})" if frame.path else \
        f"the traced module ({type(frame.module).__name__})"


def _const_leaf(leaf):
    return int(leaf) if isinstance(leaf, TracedInt) else leaf


def bind_outputs(tracer: Tracer, frame: Frame, out) -> list:
    leaves, spec = flatten(out)
    opaque.check_leaves(out, f"the output of {_callee_name(frame)}", user_location(3))
    frame.graph.out_spec = spec
    frame.graph.outputs = [tracer.to_ir(x) if isinstance(x, (torch.Tensor, TracedInt)) else x for x in leaves]
    return leaves


def check_backward_hooks(module: nn.Module, path: str) -> None:
    if module._backward_hooks or module._backward_pre_hooks:
        where = f"submodule '{path}'" if path else "the traced module"
        raise BackwardHookError(
            f"Modules that have backward hooks assigned can't be compiled: {where} ({type(module).__name__}) "
            "has a backward hook, and backward hooks cannot be traced. Remove them before tracing and "
            "register them on the traced module instead.")


class ModuleCalls:
    """While active, calls of modules in the traced hierarchy are recorded as call_module nodes."""

    def __init__(self, tracer: Tracer):
        self.tracer = tracer

    @contextlib.contextmanager
    def active(self):
        """Record this thread's submodule calls (through the ``nn.Module.__call__`` stand-in of ``patches``)."""
        previous = patches.set_module_calls(self)
        try:
            yield
        finally:
            patches.set_module_calls(previous)

    def call(self, module, original, args, kwargs):
        tracer = self.tracer
        path = tracer.module_paths.get(id(module))
        parent = tracer.frame
        if path is None or parent.module is None or not _is_below(path, parent.path):
            return original(module, *args, **kwargs)
        check_backward_hooks(module, path)
        graph = Graph(name="forward", module_type=type(module).__name__)
        child = Frame(graph, module, path, parent)
        traced_through = path in tracer.through or internal(through.cannot_flatten)((args, kwargs))
        outer = internal(bind_inputs)(tracer, child, args, kwargs, module.forward, parent, traced_through)
        tracer.frames.append(child)
        try:
            out = original(module, *args, **kwargs)
            traced_through = traced_through or internal(through.cannot_flatten)(out)
            out_leaves = None if traced_through else internal(bind_outputs)(tracer, child, out)
        finally:
            tracer.frames.pop()
            tracer.finished.remember(child, parent)   # what it computed and did not return (escapes.py)
        if traced_through:   # an ImageList in or out, or a tensor it handed out (escapes.py): into the caller's graph
            internal(through.splice)(parent, child, outer, path[len(parent.path) + 1:] if parent.path else path)
            return out
        return internal(self._finish_call)(module, path, parent, child, outer, out, out_leaves)

    def _finish_call(self, module, path, parent, child, outer, out, out_leaves):
        tracer = self.tracer
        graph = child.graph
        method = self.register(path, graph)
        rel = path[len(parent.path) + 1:] if parent.path else path
        call_args = [v for v in outer] + [o for o, _ in child.captures]
        node = Node("tracejit::call_module", "", tuple(call_args),
                    attrs={"path": rel, "method": method, "n_captures": len(child.captures)},
                    source=user_location(2))
        grad_mode.mark(tracer, node)
        out_types = [TensorType.of(x) if isinstance(x, torch.Tensor) else
                     ScalarType("int") if isinstance(x, TracedInt) and isinstance(o, Value) else None
                     for x, o in zip(out_leaves, graph.outputs)]
        dynamic = any(v is not None and v.dynamic for v in call_args)
        parent.graph.add_node(node, out_types, dynamic)
        parent.graph.callees[(rel, method)] = tracer.methods[path][method]
        for x, v in zip(out_leaves, node.outputs):
            if v is not None:
                parent.bind(x, v)
        return out

    def register(self, path: str, graph: Graph) -> str:
        """Store the graph as a method of the module at ``path``; identical calls share one method."""
        methods = self.tracer.methods.setdefault(path, {})
        keys = self.tracer._method_keys.setdefault(path, {})
        key = format_graph(graph, with_source=False) + repr(graph.in_spec) + repr(graph.input_leaves)
        for name, k in keys.items():
            if k == key:
                return name
        name = "forward" if not methods else f"forward_{len(methods)}"
        graph.name = name
        methods[name] = graph
        keys[name] = key
        return name


def _is_below(path: str, parent_path: str) -> bool:
    if path == parent_path:
        return False
    return parent_path == "" or path.startswith(parent_path + ".")
