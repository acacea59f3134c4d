"""Inline submodule calls: one flat graph for the whole method."""
from __future__ import annotations

from ..ir import Graph, Node, Value, map_values


def inline_calls(graph: Graph, prefix: str = "") -> Graph:
    """Return a new Graph where every ``tracejit::call_module`` is replaced by the callee's nodes.

    ``get_attr`` paths become relative to the outer graph's module, and node scopes record
    the submodule path each node came from.
    """
    out = Graph(name=graph.name, in_spec=graph.in_spec, out_spec=graph.out_spec, arg_names=graph.arg_names, param_names=graph.param_names,
                module_type=graph.module_type)
    env: dict[int, object] = {}
    for v in graph.inputs:
        nv = out.add_input(v.type, v.hint, v.dynamic)
        env[id(v)] = nv
    out.input_leaves = [env.get(id(x), x) if isinstance(x, Value) else x for x in graph.input_leaves]
    _copy_nodes(graph, out, env, prefix)
    out.outputs = [map_values(o, lambda v: env[id(v)]) for o in graph.outputs]
    return out


def _copy_nodes(src: Graph, out: Graph, env: dict, prefix: str) -> None:
    for node in src.nodes:
        if node.op == "tracejit::call_module":
            callee: Graph = node.attrs["graph"]
            path = f"{prefix}{node.attrs['path']}."
            inner_env: dict[int, object] = {}
            actual = [map_values(a, lambda v: env[id(v)]) for a in node.args]
            for v, a in zip(callee.inputs, actual):
                inner_env[id(v)] = a
            _copy_nodes(callee, out, inner_env, path)
            for v, o in zip(node.outputs, callee.outputs):
                if v is not None:
                    env[id(v)] = map_values(o, lambda x: inner_env[id(x)])
            continue
        new = Node(node.op, node.target, map_values(node.args, lambda v: env[id(v)]),
                   map_values(node.kwargs, lambda v: env[id(v)]), attrs=dict(node.attrs), source=node.source,
                   effectful=node.effectful, scope=prefix.rstrip(".") or node.scope)
        if node.op == "tracejit::get_attr":
            new.attrs["path"] = prefix + node.attrs["path"]
        if node.op == "tracejit::constant":
            new.attrs["index"] = _constant_index(out, src.constants[node.attrs["index"]])
        out.add_node(new, [None if v is None else v.type for v in node.outputs],
                     dynamic=any(v is not None and v.dynamic for v in node.outputs))
        for v, nv in zip(node.outputs, new.outputs):
            if v is not None:
                env[id(v)] = nv


def _constant_index(graph: Graph, value) -> int:
    """The index of ``value`` in ``graph.constants``, appended once: a tensor that two callees read
    (tied weights) stays one constant, so no later pass gives each use its own copy."""
    for i, c in enumerate(graph.constants):
        if c is value:
            return i
    graph.constants.append(value)
    return len(graph.constants) - 1
