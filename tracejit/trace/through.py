"""A submodule call whose inputs or outputs tracejit cannot flatten is traced through in place.

torchvision's detection models pass an ``ImageList`` (a plain Python object holding a tensor and the
image sizes) from ``transform`` to ``rpn`` and ``roi_heads``. Such a call cannot be a
``tracejit::call_module`` node (its arguments and results are not tensors, traced sizes and
constants), so, as torch.jit.trace does, its ops are recorded into the caller's graph: the callee's
graph is spliced in where the call was, with ``get_attr`` and nested submodule calls made relative
to the caller, and every tensor and traced size the callee knew is known to the caller. Nothing is
frozen: tensors inside the object were recorded as the callee made or read them. The calls the
callee makes to its own submodules stay ``call_module`` nodes, so the hierarchy is kept everywhere
else. A root (the traced module or function itself) whose inputs or outputs cannot be flattened is
still refused (trace/opaque.py).
"""
from __future__ import annotations

import torch

from ..ir import Node, Value, map_values
from ..ops.names import CALL_MODULE, GET_ATTR
from ..pytree import KEYED, flatten, has_kind
from .opaque import _PLAIN, holds_tensors


def cannot_flatten(obj) -> bool:
    """Does ``obj`` (a call's arguments or result) hold an object with tensors that pytree cannot flatten, or a
    dict keyed by tensors (a program's own output may be one; a submodule's call is traced through)?"""
    leaves, spec = flatten(obj)
    return any(not isinstance(leaf, (torch.Tensor, *_PLAIN)) and holds_tensors(leaf) for leaf in leaves) \
        or has_kind(spec, KEYED)


def splice(parent, child, outer: list, rel: str) -> None:
    """Copy ``child``'s recorded nodes into ``parent``'s graph (``outer``: the parent's values of the
    child's inputs, in order) and make every object the child knew known to the parent."""
    graph, into = child.graph, parent.graph
    actual = list(outer) + [o for o, _ in child.captures]
    env: dict[int, object] = {id(v): a for v, a in zip(graph.inputs, actual)}
    prefix = rel + "."
    for node in graph.nodes:
        new = Node(node.op, node.target, map_values(node.args, lambda v: env[id(v)]),
                   map_values(node.kwargs, lambda v: env[id(v)]), attrs=dict(node.attrs), source=node.source,
                   effectful=node.effectful, scope=(prefix + node.scope).rstrip(".") if node.scope else rel)
        if node.op in (GET_ATTR, CALL_MODULE):
            new.attrs["path"] = prefix + node.attrs["path"]
        if node.op == CALL_MODULE:
            into.callees[(new.attrs["path"], node.attrs["method"])] = graph.callee(node)
        if node.attrs.get("function_id") in graph.functions:   # a custom autograd Function's node
            into.functions[node.attrs["function_id"]] = graph.functions[node.attrs["function_id"]]
        elif node.op == "tracejit::constant":
            new.attrs["index"] = len(into.constants)
            into.constants.append(graph.constants[node.attrs["index"]])
        into.add_node(new, [None if v is None else v.type for v in node.outputs],
                      dynamic=any(v is not None and v.dynamic for v in node.outputs))
        for v, nv in zip(node.outputs, new.outputs):
            if v is not None:
                env[id(v)] = nv
    for key, v in child.env.items():
        if isinstance(v, Value) and id(v) in env:
            parent.env[key] = env[id(v)]
    parent.keep.extend(child.keep)
