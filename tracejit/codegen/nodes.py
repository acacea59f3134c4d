"""One statement per graph node: ``name = <call>`` from the node's op and target.

The target says how to call it (``method:view`` -> ``x.view(...)``, ``fn:torch.add``,
``attr:T``, ``op:+``, ``index:select``); tracejit's own ops (get_attr, constant,
call_module, the capture ops) have rules of their own. ``gen`` is the ``CodeGen``
(codegen/python.py).
"""
from __future__ import annotations

from ..ir import Node, Value
from ..pytree import Spec
from ..trace import indexing
from . import budget_emit, capture_emit, rng_emit, sym_emit


def emit_node(gen, node: Node) -> None:
    if id(node) in gen.skipped:
        return
    if gen.budget is not None:   # a program loaded from a file: its call-time size check
        budget_emit.before_node(gen, node)
    outs = node.outputs
    rhs = node_expr(gen, node)
    if rhs is None:
        return
    if not outs:
        gen.emit(rhs, node.source)
        return
    if "unpack" in node.attrs or node.op == "tracejit::call_module":
        names = [gen.namer.define(v, _node_hint(node)) if v is not None else "_" for v in outs]
        if node.op == "tracejit::call_module" and not node.attrs.get("unpack"):
            emit_call_module_outputs(gen, node, rhs, names)
            return
        gen.emit(f"{', '.join(names)}{',' if len(names) == 1 else ''} = {rhs}", node.source)
        return
    v = outs[0]
    if v is None:
        gen.emit(rhs, node.source)
        return
    inplace = gen.inplace.get(id(node))
    if inplace and not capture_emit.builds_grad(node):
        gen.needs_grad_check = True
        rest = ", ".join(gen.expr(a) for a in node.args[1:])
        rhs = f"{gen.expr(node.args[0])}.{inplace}({rest}) if _no_grad else {rhs}"
    gen.emit(f"{gen.namer.define(v, _node_hint(node))} = {rhs}", node.source)


def emit_call_module_outputs(gen, node: Node, rhs: str, names: list[str]) -> None:
    spec: Spec = gen.callee_graph(node).out_spec
    if spec.kind == "leaf":
        gen.emit(f"{names[0]} = {rhs}", node.source)
        return
    tmp = gen.fresh(_node_hint(node) + "_out")
    gen.emit(f"{tmp} = {rhs}", node.source)
    for name, path in zip(names, _leaf_paths(spec)):
        if name != "_":
            gen.emit(f"{name} = {tmp}{path}")


def node_expr(gen, node: Node) -> str | None:
    op, target = node.op, node.target
    if op == "tracejit::get_attr":
        return _attr_path(node.attrs["path"], node.attrs.get("kind", "parameter"))
    if op == "tracejit::constant":
        return gen.const_global(gen.graph.constants[node.attrs["index"]])
    if op == "tracejit::call_module":
        return call_module_expr(gen, node)
    if op in capture_emit.OPS:
        return capture_emit.node_expr(gen, node)
    if op == "tracejit::kernel":   # in memory only: a callable a lowering pass built (passes/lowered.py)
        return f"{gen.const_global(_kernel(gen, node))}({gen.call_args(node)})"
    if op in sym_emit.OPS:
        return sym_emit.node_expr(gen, node)
    if op in rng_emit.OPS:
        return rng_emit.node_expr(gen, node)
    if target is None:
        raise NotImplementedError(f"codegen: no rule for {op} (it has no call target)")
    kind, what = target.kind, target.name
    a = node.args
    if kind == "method":
        return f"{gen.expr(a[0])}.{what}({gen.call_args(node, 1)})"
    if kind == "fn":
        return f"{what}({gen.call_args(node)})"
    if kind == "attr":
        return f"{gen.expr(a[0])}.{what}"
    if kind == "op":
        checked = budget_emit.int_op_expr(gen, node)
        if checked is not None:
            return checked
        if what.startswith("u"):
            return f"{what[1:]}{gen.expr(a[0])}"
        if what.startswith("r"):
            return f"{gen.expr(a[1])} {what[1:]} {gen.expr(a[0])}"
        return f"{gen.expr(a[0])} {what} {gen.expr(a[1])}"
    if kind == "index":
        return index_expr(gen, what, node)
    raise NotImplementedError(f"codegen: no rule for {op} ({target})")


def index_expr(gen, what: str, node: Node) -> str:
    a = node.args
    x = gen.expr(a[0])
    if what == "select":
        return x + indexing.index_expr(a[1], gen.expr(a[2]))
    if what == "slice":
        return x + indexing.index_expr(a[1], indexing.slice_text(gen.expr(a[2]), gen.expr(a[3]),
                                                                 gen.expr(a[4])))
    if what == "index":
        return x + indexing.advanced_text(a[1], gen.expr)
    if what == "getitem":
        return f"{x}[{gen.expr(a[1])}]"
    if what == "setitem":
        return f"{x}[{gen.expr(a[1])}] = {gen.expr(a[2])}"
    if what == "setitem_index":
        return f"{x}{indexing.advanced_text(a[1], gen.expr)} = {gen.expr(a[2])}"
    raise NotImplementedError(what)


def call_module_expr(gen, node: Node) -> str:
    callee = gen.callee_graph(node)
    n_cap = node.attrs["n_captures"]
    plain = node.args[: len(node.args) - n_cap]
    caps = node.args[len(node.args) - n_cap:]
    leaves = iter(callee.input_leaves)
    values = iter(plain)
    spec: Spec = callee.in_spec
    args_spec, kwargs_spec = spec.children
    parts = [gen.rebuild(c, _leaf_values(leaves, values)) for c in args_spec.children]
    parts += [f"{k}={gen.rebuild(c, _leaf_values(leaves, values))}"
              for k, c in zip(kwargs_spec.keys, kwargs_spec.children)]
    parts += [f"_capture_{i}={gen.expr(c)}" for i, c in enumerate(caps)]
    return f"{_attr_path(node.attrs['path'])}.{node.attrs['method']}({', '.join(parts)})"


def _node_hint(node: Node) -> str:
    if node.op == "tracejit::get_attr":
        return node.attrs["path"].replace(".", "_")
    if node.op == "tracejit::call_module":
        return node.attrs["path"].replace(".", "_")
    if node.op in capture_emit.OPS:
        return capture_emit.node_hint(node)
    return node.name.strip("_") or "v"


def _leaf_values(leaves, values):
    """Yield, per callee input leaf, the caller's Value (for inputs) or the constant."""
    for leaf in leaves:
        yield next(values) if isinstance(leaf, Value) else leaf


def _leaf_paths(spec: Spec, prefix: str = ""):
    if spec.kind == "leaf":
        yield prefix
        return
    keys = spec.keys if spec.kind == "dict" else range(len(spec.children))
    for k, c in zip(keys, spec.children):
        yield from _leaf_paths(c, f"{prefix}[{k!r}]")


def _attr_path(path: str, kind: str = "module") -> str:
    """``self._modules['conv']._parameters['weight']``: the storage nn.Module itself reads.

    Direct dict lookups skip ``nn.Module.__getattr__`` (a Python call per step) and always
    see the module's current parameters, buffers and submodules.
    """
    *mods, last = path.split(".")
    expr = "self" + "".join(f"._modules[{m!r}]" for m in mods)
    store = {"module": "_modules", "parameter": "_parameters", "buffer": "_buffers"}[kind]
    return f"{expr}.{store}[{last!r}]"


def _kernel(gen, node):
    """The callable a kernel node indexes in the lowered program's table codegen was handed."""
    index = node.attrs["index"]
    if not 0 <= index < len(gen.kernels):
        raise ValueError(f"kernel node {index} of graph {gen.graph.name!r}: the lowered program's kernel table holds "
                         f"{len(gen.kernels)} (generate a lowered graph with its kernels: passes/lowered.py)")
    return gen.kernels[index]
