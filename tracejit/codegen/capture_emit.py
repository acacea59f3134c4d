"""Codegen for device/dtype-relative values, grad-mode regions and custom autograd Functions.

    tracejit::dtype_of(x)                 x.dtype
    tracejit::device_of(x)                x.device
    tracejit::finfo(d)[attr]              torch.finfo(d).attr
    tracejit::autograd_function(a, outs)  Cls.apply(*a)             (in memory; the forward's ops are skipped)
                                          _tj_no_backward(...)      (loaded: the forward's ops, no backward)

Runs of nodes with the same ``attrs["grad"]`` are emitted inside one ``with`` block.
"""
from __future__ import annotations

import re

from ..ir import regions
from ..pytree import rebuild_registered as rebuild, registered_node
from ..ops.names import AUTOGRAD_FUNCTION, DEVICE_OF, DTYPE_OF, FINFO, FINFO_ATTRS
from ..lazy_module import LazyModule

# only for a custom autograd Function's node (rare): a server's load imports it when a graph has one (#22)
_no_backward = LazyModule("..support.no_backward", __package__)

OPS = {DTYPE_OF, DEVICE_OF, FINFO, AUTOGRAD_FUNCTION}


def region_of(node) -> tuple | None:
    """(grad mode or None, autocast states) the node runs in, or None for the caller's modes."""
    if node is None:
        return None
    grad = node.attrs.get("grad")
    grad = grad if grad in regions.REGIONS else None
    autocast = tuple(node.attrs.get("autocast") or ())
    return (grad, autocast) if grad or autocast else None


def builds_grad(node) -> bool:
    """Does this node run in an explicit enable_grad region (where in-place reuse is never safe)?"""
    region = region_of(node)
    return region is not None and region[0] == regions.ENABLE_GRAD


def enter_region(gen, node) -> None:
    """Open, close or switch the grad-mode ``with`` block before emitting ``node`` (None: close)."""
    if node is not None and id(node) in gen.skipped:
        return
    region = region_of(node)
    current = getattr(gen, "region", None)
    if region == current:
        return
    gen.indent = ""
    if region is not None:
        gen.emit(_header(region))   # every node that opens a region emits a line into it
        gen.indent = "    "
    gen.region = region


def _header(region: tuple) -> str:
    grad, autocast = region
    parts = [regions.region_context(grad)] if grad else []
    parts += regions.autocast_header_parts(list(autocast))
    return f"with {', '.join(parts)}:"


def skipped_nodes(graph) -> set:
    """The forward ops of custom autograd Functions that are called as themselves (in memory)."""
    called = {n.attrs.get("function_id") for n in graph.nodes
              if n.op == AUTOGRAD_FUNCTION and n.attrs.get("function_id") in graph.functions}
    if not called:
        return set()
    return {id(n) for n in graph.nodes if n.attrs.get("in_function") in called}


def node_hint(node) -> str:
    """A readable name for the value: ``roundste`` for a Function RoundSTE, ``dtype`` for x.dtype."""
    if node.op == AUTOGRAD_FUNCTION:
        return re.sub(r"\W+", "_", str(node.attrs.get("name", "fn")).rsplit(".", 1)[-1]).lower() or "fn"
    return {DTYPE_OF: "dtype", DEVICE_OF: "device", FINFO: "finfo"}[node.op]


def node_expr(gen, node) -> str:
    op, a = node.op, node.args
    if op == DTYPE_OF:
        return f"{gen.expr(a[0])}.dtype"
    if op == DEVICE_OF:
        return f"{gen.expr(a[0])}.device"
    if op == FINFO:
        attr = node.attrs["attr"]
        if attr not in FINFO_ATTRS:
            raise ValueError(f"codegen: torch.finfo has no attribute {attr!r} tracejit records")
        return f"torch.finfo({gen.expr(a[0])}).{attr}"
    apply_args, outputs = a
    fn = gen.graph.functions.get(node.attrs.get("function_id"))
    if fn is not None:
        return f"{gen.const_global(fn)}.apply({', '.join(gen.expr(x) for x in apply_args)})"
    unpack = node.attrs.get("unpack")
    layout = None if unpack is None else tuple(v is not None for v in node.outputs)
    helper = gen.const_global(_no_backward.call_without_backward)
    return (f"{helper}({str(node.attrs['name'])!r}, {str(node.source)!r}, {gen.expr(tuple(apply_args))}, "
            f"{gen.expr(tuple(outputs))}, {layout!r})")


# ---- classes registered with torch.utils._pytree ------------------------------------------------------
def rebuild_registered(gen, spec, items: list) -> str:
    return f"{gen.const_global(rebuild)}({gen.const_global(spec)}, [{', '.join(items)}])"


def registered_children(gen, expr: str, spec, where: str) -> str:
    """Emit the flattening of a registered-class input; returns the name of its list of children."""
    name = gen.fresh("children")
    gen.emit(f"{name} = {gen.const_global(_children_of)}({expr}, {gen.const_global(spec)}, {where!r})")
    return name


def _children_of(obj, spec, where: str) -> list:
    node = registered_node(obj)
    if type(obj) is not spec.type or node is None:
        raise TypeError(f"argument '{where}' should be a {spec.type.__qualname__}; got {type(obj).__qualname__}")
    children, context = node.flatten_fn(obj)
    if len(children) != len(spec.children) or context != spec.keys[0]:
        raise ValueError(f"argument '{where}' is a {spec.type.__qualname__} of another structure than at trace "
                         f"time ({len(children)} children, context {context!r}; traced with {len(spec.children)}, "
                         f"{spec.keys[0]!r})")
    return list(children)
