"""Freezing: the parameters and buffers a graph reads become constants of the program.

``tracejit::get_attr`` nodes are replaced by ``tracejit::constant`` nodes holding a detached
copy of the tensor: later in-place changes to the module do not reach the frozen program. That
differs on purpose from torch.jit's freeze, which keeps the module's tensors (docs/COMPAT.md):
folded and re-laid-out weights could not follow such a change, so every path is a snapshot. Paths in ``preserved`` stay attribute reads. Paths that name one tensor
(tied weights, such as a language model's embedding and output layer) share one copy.
A frozen constant does not require grad, so neither does a value computed only from such
constants and other values that do not: the types say so.
"""
from __future__ import annotations

from ..errors import GuardError
from ..ir import Graph, Node, TensorType, verify
from ..support.guards import GuardFailure
from .graph_copy import copy_graph


def freeze_attributes(graph: Graph, tensor_of, preserved=()) -> Graph:
    """A new graph where every get_attr not in ``preserved`` is a constant.

    ``tensor_of(path)`` returns the module's tensor at ``path`` ("layer.0.weight"). ``graph`` must be flat
    (passes/inline.py first): a submodule's parameters are read inside its own method.
    """
    if any(n.op == "tracejit::call_module" for n in graph.nodes):
        raise ValueError(f"freeze_attributes: graph {graph.name!r} calls submodule methods; inline them first "
                         "(tracejit.passes.inline.inline_calls)")
    out = copy_graph(graph)
    keep = set(preserved)
    copies: dict[int, tuple] = {}   # id(module tensor) -> (index of its frozen copy, the tensor: kept alive)
    nodes = []
    for node in out.nodes:
        path = node.attrs.get("path")
        if node.op == "tracejit::guard" and node.attrs.get("test") == "training" and path:
            try:   # a frozen program has no submodules to switch: the flag it freezes must be the traced one
                _check_submodule_flag(node, tensor_of(path))
            except (AttributeError, KeyError):
                pass   # ``tensor_of`` finds only tensors here: nothing to check the flag against
            continue
        if node.op != "tracejit::get_attr" or path in keep or _under(path, keep):
            nodes.append(node)
            continue
        tensor = tensor_of(path)
        if id(tensor) not in copies:
            copies[id(tensor)] = (len(out.constants), tensor)
            out.constants.append(tensor.detach().clone())
        const = Node("tracejit::constant", "", attrs={"index": copies[id(tensor)][0], "frozen_from": path},
                     source=node.source, scope=node.scope)
        const.outputs = node.outputs
        for v in const.outputs:
            if v is not None:
                v.producer = const
        nodes.append(const)
    out.nodes = nodes
    _clear_requires_grad(out)
    verify(out)
    return out


def _check_submodule_flag(guard, module) -> None:
    """Freezing fixes a submodule's training flag: it must be the one the trace read (trace/module_flags.py)."""
    if bool(getattr(module, "training", guard.attrs["expected"])) != guard.attrs["expected"]:
        raise GuardError(GuardFailure([(guard, "")], "freeze").message(guard, "", not guard.attrs["expected"]),
                         guard=guard, expected=guard.attrs["expected"], seen=not guard.attrs["expected"])


def _clear_requires_grad(graph: Graph) -> None:
    """A node whose tensor inputs no longer require grad makes outputs that do not either."""
    def clear(node):
        for v in node.outputs:
            if v is not None and isinstance(v.type, TensorType) and v.type.requires_grad:
                v.type = v.type.replace(requires_grad=False)
    for node in graph.nodes:
        if node.op == "tracejit::constant":
            clear(node)
            continue
        ins = [v for v in node.input_values() if isinstance(v.type, TensorType)]
        if ins and not any(v.type.requires_grad for v in ins):
            clear(node)


def _under(path: str, prefixes) -> bool:
    return any(path.startswith(p + ".") for p in prefixes)
