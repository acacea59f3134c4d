"""A fresh copy of a Graph (new Nodes and Values), so passes never change the graph a user holds.

Copying never inlines: a ``tracejit::call_module`` node is copied as it is, with the graph's link table
(``Graph.callees``). Inlining is its own pass (passes/inline.py), run where a flat graph is needed.
"""
from __future__ import annotations

from ..ir import Graph, Node, Value, map_values
from ..ops.names import AUTOGRAD_FUNCTION, CALL_MODULE, CONSTANT, GET_ATTR, GUARD


def copy_graph(graph: Graph) -> Graph:
    """A copy of ``graph``: new Nodes and Values, the same constant tensors, callees and Functions (a kernel
    node keeps its index into the lowered program's table: passes/lowered.py)."""
    out = empty_like(graph)
    env = copy_inputs(graph, out)
    copy_nodes(graph, out, env)
    out.outputs = [map_values(o, lambda v: env[id(v)]) for o in graph.outputs]
    return out


def empty_like(graph: Graph) -> Graph:
    """A Graph with ``graph``'s signature, structure and flags but no inputs, nodes or outputs."""
    out = Graph(name=graph.name, in_spec=graph.in_spec, out_spec=graph.out_spec, arg_names=graph.arg_names,
                param_names=graph.param_names, module_type=graph.module_type, training=graph.training,
                call_budget=graph.call_budget, exact_keys=graph.exact_keys,
                grad_exit=graph.grad_exit)
    out.memory_checks = graph.memory_checks   # in-memory checks of globals (ir/graph.py): the copy runs them too
    return out   # a loaded program stays checked when passes rebuild it


def copy_inputs(graph: Graph, out: Graph) -> dict:
    """Give ``out`` a copy of each input of ``graph``; returns ``{id(old value): new value}``."""
    env: dict[int, object] = {}
    for v in graph.inputs:
        env[id(v)] = out.add_input(v.type, v.hint, v.dynamic, v.capture)
    out.input_leaves = [env.get(id(x), x) if isinstance(x, Value) else x for x in graph.input_leaves]
    return env


def copy_nodes(src: Graph, out: Graph, env: dict, prefix: str = "", inline=False) -> None:
    """Append a copy of each node of ``src`` to ``out`` (``env`` maps ``src``'s values to ``out``'s and
    grows). ``prefix``: the submodule path ``src`` runs at below ``out``'s module (get_attr paths and
    scopes follow it); ``inline``: a call_module node is replaced by a copy of its callee's nodes (True: every
    call; a function of the callee Graph: the calls it says yes to, at any depth; serialize/left_out.py)."""
    for node in src.nodes:
        if node.op == CALL_MODULE and inline and (inline is True or inline(src.callee(node))):
            callee: Graph = src.callee(node)
            path = f"{prefix}{node.attrs['path']}."
            inner_env: dict[int, object] = {}
            actual = [map_values(a, lambda v: env[id(v)]) for a in node.args]
            for v, a in zip(callee.inputs, actual):
                inner_env[id(v)] = a
            copy_nodes(callee, out, inner_env, path, inline)
            for v, o in zip(node.outputs, callee.outputs):
                if v is not None:
                    env[id(v)] = map_values(o, lambda x: inner_env[id(x)])
            continue
        new = Node(node.op, node.target, map_values(node.args, lambda v: env[id(v)]),
                   map_values(node.kwargs, lambda v: env[id(v)]), attrs=dict(node.attrs), source=node.source,
                   effectful=node.effectful or node.op == GUARD,   # a guard's check survives DCE, CSE, folding
                   scope=prefix.rstrip(".") or node.scope)
        if node.op in (GET_ATTR, CALL_MODULE) and prefix:
            new.attrs["path"] = prefix + node.attrs["path"]
        if node.op == CALL_MODULE:
            out.callees[(new.attrs["path"], node.attrs["method"])] = src.callee(node)
        if node.op == CONSTANT:
            new.attrs["index"] = _constant_index(out, src.constants[node.attrs["index"]])
        elif node.op == AUTOGRAD_FUNCTION and node.attrs.get("function_id") in src.functions:
            out.functions[node.attrs["function_id"]] = src.functions[node.attrs["function_id"]]
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


def replace_uses(graph: Graph, mapping: dict) -> None:
    """Replace every use of a Value ``v`` with ``mapping[id(v)]`` (a Value or a constant), in place."""

    def sub(v):
        return mapping.get(id(v), v) if isinstance(v, Value) else v

    for node in graph.nodes:
        node.args = map_values(node.args, sub)
        node.kwargs = map_values(node.kwargs, sub)
    graph.outputs = [map_values(o, sub) for o in graph.outputs]
    graph.input_leaves = list(graph.input_leaves)
