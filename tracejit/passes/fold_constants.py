"""Constant folding: pure nodes that read only constants are computed once, at optimization time.

The foldable part of the graph is run through tracejit's own code generator (so each op is
called exactly as the traced program would call it); every folded value still used by the
rest of the program becomes a ``tracejit::constant`` (tensors) or a Python number (sizes).
Ops whose result is larger than their constant inputs (expand, repeat, zeros of a traced size
...: ``ops.outgrows_inputs``) are left alone: folding them would only store more data. A folded value the program returns
that is not a view of a constant (``self.w * 2``, where eager makes a new tensor every call) is
returned through ``clone()``, so a caller writing into the result does not change later calls; a
value the program itself writes into (``c = self.w * 2; c.add_(x)``) is computed every call.
"""
from __future__ import annotations

import torch

from .. import pytree
from ..ir import Graph, Node, ScalarType, TensorType, Value, iter_values, map_values, verify
from ..ops import mergeable, outgrows_inputs
from ..codegen.python import compile_function, generate
from .dce import eliminate_dead_code
from .graph_copy import copy_graph, replace_uses
from .written import written_values


def fold_constants(graph: Graph) -> Graph:
    out = copy_graph(graph)
    written = written_values(out, outputs=False)   # computed once, such a tensor would carry writes over
    const_values: set[int] = set()
    folded: list[Node] = []
    for node in out.nodes:
        if node.op == "tracejit::constant":
            const_values.update(id(v) for v in node.outputs if v is not None)
            folded.append(node)
            continue
        inputs = list(node.input_values())
        if not inputs or not mergeable(node) or node.op.startswith("tracejit::") or outgrows_inputs(node.op):
            continue
        if all(id(v) in const_values for v in inputs) and all(
                v is None or (isinstance(v.type, (TensorType, ScalarType)) and id(v) not in written)
                for v in node.outputs):
            const_values.update(id(v) for v in node.outputs if v is not None)
            folded.append(node)
    computed = [n for n in folded if n.op != "tracejit::constant"]
    if not computed:
        return out
    folded_ids = {id(n) for n in folded}
    live = _used_outside(out, folded_ids, const_values)
    results = _evaluate(out, folded, live)
    mapping: dict = {}
    fresh: list = []   # ids of folded output values eager computes anew each call (not views of a constant)
    outputs = {id(v) for v in iter_values(out.outputs)}
    storages = {c.untyped_storage().data_ptr() for c in out.constants if isinstance(c, torch.Tensor)
                and c.layout == torch.strided and c.device.type != "meta"}
    nodes = []
    for node in out.nodes:
        if id(node) not in folded_ids:
            nodes.append(node)
            continue
        if node.op == "tracejit::constant":
            nodes.append(node)
            continue
        for v in node.outputs:
            if v is None or id(v) not in live:
                continue
            value = results[id(v)]
            if isinstance(value, torch.Tensor):
                const = Node("tracejit::constant", "", attrs={"index": len(out.constants), "folded_from": node.op},
                             source=node.source, scope=node.scope)
                out.constants.append(value)
                out.add_node(const, [v.type])
                out.nodes.pop()
                nodes.append(const)
                mapping[id(v)] = const.outputs[0]
                if id(v) in outputs and not _aliases(value, storages):
                    fresh.append(id(v))
            else:
                mapping[id(v)] = value
    out.nodes = nodes
    replace_uses(out, mapping)
    _fresh_outputs(out, {id(mapping[k]) for k in fresh})
    eliminate_dead_code(out)
    verify(out)
    return out


def _aliases(value: torch.Tensor, storages: set) -> bool:
    try:
        return value.untyped_storage().data_ptr() in storages
    except (RuntimeError, NotImplementedError):   # no storage (sparse, ...): treat as a view, keep it
        return True


def _fresh_outputs(graph: Graph, fresh: set) -> None:
    """A returned folded constant that eager computes anew each call (``self.w * 2``) is returned
    through ``clone()``: the caller may write into it, and the next call must not see that."""
    made: dict = {}

    def fix(v):
        if id(v) not in fresh:
            return v
        if id(v) not in made:
            node = Node("aten::clone.default", "method:clone", args=(v,), source=v.producer.source,
                        scope=v.producer.scope)
            node.outputs = [Value(v.type, node, 0, v.hint, v.dynamic)]
            graph.nodes.append(node)
            made[id(v)] = node.outputs[0]
        return made[id(v)]

    graph.outputs = [map_values(o, fix) for o in graph.outputs]


def _used_outside(graph: Graph, folded_ids: set, const_values: set) -> set:
    live = set()
    for node in graph.nodes:
        if id(node) in folded_ids:
            continue
        live.update(id(v) for v in node.input_values() if id(v) in const_values)
    live.update(id(v) for v in iter_values(graph.outputs) if id(v) in const_values)
    return live


def _evaluate(graph: Graph, nodes: list, live: set) -> dict:
    """Run ``nodes`` (constants first) with tracejit's codegen; {id(value): result} for live values."""
    wanted = [v for n in nodes for v in n.outputs if v is not None and id(v) in live]
    sub = Graph(name="fold", nodes=list(nodes), outputs=list(wanted), constants=graph.constants,
                functions=graph.functions)
    sub.in_spec = pytree.flatten(((), {}))[1]
    sub.out_spec = pytree.flatten(tuple(range(len(wanted))))[1]
    src, globs = generate(sub, "fold")
    fn = compile_function(src, "fold", globs, "fold_constants")
    with torch.no_grad():
        values = fn(None)
    values = values if isinstance(values, tuple) else (values,)
    return {id(v): x for v, x in zip(wanted, values)}
