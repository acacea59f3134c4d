"""Graph <-> JSON-able data. Plain values only: no pickle, no code.

Values are numbered in definition order (graph inputs first, then node outputs)
and referenced as ``{"v": n}``. Constants are JSON natives where JSON has them,
else tagged: ``{"dtype": "float32"}``, ``{"device": "cpu"}``, ``{"tuple": [...]}``,
``{"slice": [start, stop, step]}``, ``{"float": "inf"}``, ...
"""
from __future__ import annotations

import torch

from ..errors import LoadError, SaveError
from ..ir import Graph, Node, ScalarType, SourceLoc, TensorType, Value
from ..ops.names import GETITEM, SETITEM, base_name
from ..ir.ops import saved_attrs
from ..ir.target import CallTargetError, as_target, target_text
from ..support.global_guards import stale_global
from ..support.module_hooks import is_hook_guard
from . import limits
from .document_checks import check_attrs, identifier
from ..lazy_module import LazyModule
from .constants import _DTYPES, _LAYOUTS, _MEMORY_FORMATS, decode_const, dtype_name, encode_const  # noqa: F401
from .structure import decode_spec, encode_spec

# what only saving checks: a server that loads programs never imports them (issue #22 item 4)
opnames = LazyModule("..trace.ops", __package__)
schema_check = LazyModule(".schema_check", __package__)
uninitialized = LazyModule(".uninitialized", __package__)
_guards = LazyModule(".guards", __package__)

# how a file marks a captured input (Value.capture): its name hint, as files have always written it
CAPTURE_HINT = "__capture__"


# ---- types and specs ------------------------------------------------------------------------------
def encode_type(t):
    if t is None:
        return None
    if isinstance(t, TensorType):
        return {"dtype": dtype_name(t.dtype), "shape": list(t.shape), "device": t.device,
                "requires_grad": t.requires_grad}
    return {"scalar": t.kind}


def decode_type(d, where: str):
    if d is None:
        return None
    if not isinstance(d, dict):
        raise LoadError(f"{where}: malformed type")
    if "scalar" in d:
        if d["scalar"] not in ("int", "float", "bool", "dtype", "device", "generator"):
            raise LoadError(f"{where}: unknown scalar type {d['scalar']!r}")
        return ScalarType(d["scalar"])
    try:
        shape = d["shape"]
        if not isinstance(shape, list) or len(shape) > 64 or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise LoadError(f"{where}: bad tensor shape {str(shape)[:80]}")
        return TensorType(_DTYPES[d["dtype"]], tuple(shape), str(torch.device(d["device"])), bool(d["requires_grad"]))
    except LoadError:
        raise
    except (KeyError, TypeError, RuntimeError) as e:
        raise LoadError(f"{where}: bad tensor type: {e}") from None


# ---- graphs ---------------------------------------------------------------------------------------
# how to write a call that has no ATen operator so that it saves
_SAVE_ADVICE = {"new_tensor": " (`x.new_tensor(data)` is Python code in torch; write `torch.tensor(data, dtype=x.dtype, "
                              "device=x.device)`, which saves, or keep the program in memory)"}


def encode_graph(graph: Graph, where: str) -> dict:
    index: dict[int, int] = {}

    def ref(v: Value):
        return {"v": index[id(v)]}

    def arg(a):
        if isinstance(a, Value):
            return ref(a)
        if isinstance(a, list):
            return [arg(x) for x in a]
        if isinstance(a, tuple):
            return {"tuple": [arg(x) for x in a]}
        if isinstance(a, slice):
            return {"slice": [arg(a.start), arg(a.stop), arg(a.step)]}
        if isinstance(a, torch.Tensor):
            raise SaveError(f"{where}: a tensor inside an op's arguments cannot be saved")
        return encode_const(a, where)

    checks = getattr(graph, "memory_checks", None)   # tensors read from globals / attributes, module config
    if checks is not None and checks.changed():   # (support/global_guards.IdentityChecks, in memory only)
        raise SaveError(f"{where}: the program was traced with Python state that has changed since "
                        f"({checks.what_changed()}). A file holds no such check: trace again to save the current "
                        "state")
    for v in graph.inputs:
        index[id(v)] = len(index)
    nodes = []
    for node in graph.nodes:
        if node.op == "tracejit::guard" and node.attrs.get("kind") == "global":
            changed = stale_global(node.attrs)
            if changed is not None:
                raise SaveError(f"{where}: the program was traced with a module-level global that has changed since "
                                f"({changed}; {node.source}). A file holds no check of Python globals: trace again "
                                "to save the current values")
            if is_hook_guard(node):   # trace/global_hooks.py: their effect is in the graph, and no file checks them
                raise SaveError(f"{where}: the program was traced with {node.attrs.get('what', 'global module hooks')}"
                                "; a file cannot check them where it is loaded, so it would apply them there "
                                "whatever is registered. Remove them and trace again to save")
            continue   # a module's global: a file is loaded where that module need not exist (trace/global_reads.py)
        if node.op in (GETITEM, SETITEM):
            raise SaveError(f"{where}: {node.op} at {node.source} indexes with a Python object that cannot be "
                            "saved as data")
        aten = base_name(node.op) if node.op.startswith("aten::") else ""
        if aten and schema_check.is_denied_op(aten):
            raise SaveError(f"{where}: {node.op} at {node.source} cannot be saved: tracejit.load refuses it "
                            "(it reaches raw storage, files, unchecked strides or a non-strided layout; see "
                            "docs/SECURITY.md)")
        if aten and opnames.aten_packet(aten) is None:
            raise SaveError(f"{where}: {node.op} at {node.source} cannot be saved: no ATen operator of that name "
                            f"exists, so tracejit.load could not run it{_SAVE_ADVICE.get(aten, '')}")
        op, target, node_kwargs = uninitialized.as_saved(node.op, target_text(node.target), node.kwargs)
        args = [arg(a) for a in node.args]
        kwargs = [[k, arg(v)] for k, v in node_kwargs.items()]   # pairs: keyword order is kept
        for v in node.outputs:
            if v is not None:
                index[id(v)] = len(index)
        keep = saved_attrs(node.op)
        attrs = {k: v for k, v in node.attrs.items() if k in keep}
        if node.op == "tracejit::guard":
            attrs = _guards.encode_attrs(node, f"{where}, guard at {node.source}")
        entry = {"op": op, "target": target, "args": args, "kwargs": kwargs,
                 "outputs": [encode_type(v.type) if v is not None else None for v in node.outputs],
                 "dynamic": any(v is not None and v.dynamic for v in node.outputs)}
        if attrs:
            entry["attrs"] = attrs
        if node.effectful:
            entry["effectful"] = True
        if node.source is not None:
            entry["source"] = [node.source.filename, node.source.lineno, node.source.function]
        nodes.append(entry)
    leaves = [ref(x) if isinstance(x, Value) else {"const": encode_const(x, where)} for x in graph.input_leaves]
    return {
        "name": graph.name,
        "module_type": graph.module_type,
        "training": graph.training,
        "inputs": [{"type": encode_type(v.type), "hint": CAPTURE_HINT if v.capture else v.hint, "dynamic": v.dynamic}
                   for v in graph.inputs],
        "input_leaves": leaves,
        "in_spec": encode_spec(graph.in_spec, where),
        "arg_names": list(graph.arg_names),
        "param_names": list(graph.param_names),
        "nodes": nodes,
        "outputs": [arg(o) for o in graph.outputs],
        "out_spec": encode_spec(graph.out_spec, where),
        **({"exact_keys": [list(p) for p in graph.exact_keys]} if graph.exact_keys else {}),
        **({"grad_exit": graph.grad_exit} if graph.grad_exit is not None else {}),
    }


def decode_graph(d: dict, where: str, callees: list | None = None) -> Graph:
    """Rebuild a Graph from data (structure only; ops are validated by validate.py; names and attributes
    here, by document_checks.py).

    ``callees``: the Graph each ``tracejit::call_module`` node calls, in node order, entered in the
    graph's link table (``Graph.callees``) under the name the node gives (module path, method).
    """
    links = iter(callees) if callees is not None else None
    sources: dict = {}   # source text -> its SourceLoc, targets: target text -> its CallTarget (frozen records, shared
    targets: dict = {}   # by the nodes of one line / one call: checked and made once per graph, not per node)
    try:
        g = Graph(name=limits.text(d["name"], f"{where}: graph name", 200),
                  module_type=limits.text(d.get("module_type", ""), f"{where}: module type", 200),
                  training=d.get("training"))
        if g.training not in (None, True, False):
            raise LoadError(f"{where}: bad training flag")
        values: list[Value] = []
        for i, inp in enumerate(_list(d["inputs"], where)):
            hint = _str_or_none(inp.get("hint"), where)
            if hint is not None:
                limits.text(hint, f"{where}: input name", 200)
            v = g.add_input(decode_type(inp["type"], where), None if hint == CAPTURE_HINT else hint,
                            bool(inp.get("dynamic", True)), capture=hint == CAPTURE_HINT)
            values.append(v)

        def arg(a, depth=0):
            if depth > 32:
                raise LoadError(f"{where}: arguments nested deeper than 32 levels")
            if isinstance(a, dict) and set(a) == {"v"}:
                n = a["v"]
                if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n < len(values):
                    raise LoadError(f"{where}: reference to value {n!r}, which is not defined before its use")
                return values[n]
            if isinstance(a, list):
                return [arg(x, depth + 1) for x in a]
            if isinstance(a, dict) and set(a) == {"tuple"} and isinstance(a["tuple"], list):
                return tuple(arg(x, depth + 1) for x in a["tuple"])
            if isinstance(a, dict) and set(a) == {"slice"} and isinstance(a["slice"], list) and len(a["slice"]) == 3:
                return slice(*(arg(x, depth + 1) for x in a["slice"]))
            return decode_const(a, where, depth)

        for i, nd in enumerate(_list(d["nodes"], where)):
            at = f"{where}, node {i}"
            if not isinstance(nd, dict):
                raise LoadError(f"{at}: malformed node")
            src = nd.get("source")
            source = None
            if src is not None:
                if not (isinstance(src, list) and len(src) == 3 and isinstance(src[0], str) and isinstance(src[1], int)):
                    raise LoadError(f"{at}: malformed source location")
                key = (src[0], src[1], src[2]) if type(src[2]) is str and type(src[1]) is int else None
                source = sources.get(key) if key is not None else None
                if source is None:
                    source = SourceLoc(limits.text(src[0], f"{at}: source file"), src[1],
                                       limits.text(src[2], f"{at}: source function"))
                    if key is not None:
                        sources[key] = source
            kwargs = nd.get("kwargs", [])
            if not isinstance(kwargs, list) or not all(isinstance(p, list) and len(p) == 2 for p in kwargs):
                raise LoadError(f"{at}: malformed keyword arguments")
            if len(kwargs) > 64:
                raise LoadError(f"{at}: {len(kwargs)} keyword arguments (at most 64)")
            for k, _ in kwargs:   # keyword names are written into generated code
                identifier(k, f"{at}: keyword argument name")
            if len({k for k, _ in kwargs}) != len(kwargs):
                raise LoadError(f"{at}: a keyword argument is given twice")
            attrs = nd.get("attrs", {})
            if not isinstance(attrs, dict):
                raise LoadError(f"{at}: malformed attributes")
            check_attrs(nd.get("op"), attrs, at)
            if links is not None and nd.get("op") == "tracejit::call_module":
                g.callees[(attrs["path"], attrs["method"])] = next(links)
            text = nd.get("target", "")
            target = targets.get(text) if type(text) is str else None
            if target is None:
                target = _target(text, at)
                if type(text) is str:
                    targets[text] = target
            node = Node(_str(nd["op"], at), target,
                        [arg(a) for a in _list(nd.get("args", []), at)],
                        {k: arg(v) for k, v in kwargs}, attrs=attrs, source=source,
                        effectful=bool(nd.get("effectful", False)))
            g.add_node(node, [decode_type(t, at) for t in _list(nd.get("outputs", []), at)],
                       dynamic=bool(nd.get("dynamic", False)))
            values.extend(v for v in node.outputs if v is not None)
        g.input_leaves = []
        for leaf in _list(d["input_leaves"], where):
            if isinstance(leaf, dict) and set(leaf) == {"const"}:
                g.input_leaves.append(decode_const(leaf["const"], where))
            else:
                v = arg(leaf)
                if not isinstance(v, Value) or v.producer is not None:
                    raise LoadError(f"{where}: an input leaf does not name a graph input")
                g.input_leaves.append(v)
        g.in_spec = decode_spec(d["in_spec"], where)
        g.out_spec = decode_spec(d["out_spec"], where)
        g.arg_names = tuple(_str(n, where) for n in _list(d["arg_names"], where))
        g.param_names = tuple(_str(n, where) for n in _list(d["param_names"], where))
        g.outputs = [arg(o) for o in _list(d["outputs"], where)]
        g.exact_keys = _exact_keys(d.get("exact_keys", []), where)
        g.grad_exit = d.get("grad_exit")
        if g.grad_exit is not None and not isinstance(g.grad_exit, bool):
            raise LoadError(f"{where}: grad_exit must be true, false or absent")
    except LoadError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise LoadError(f"{where}: malformed graph ({type(e).__name__}: {e})") from None
    return g


def _exact_keys(x, where) -> tuple:
    """Graph.exact_keys from a file: (input path, "file:line") pairs of text (trace/input_keys.py)."""
    pairs = _list(x, where)
    if len(pairs) > 10000 or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise LoadError(f"{where}: exact_keys must be a list of [input path, line] pairs")
    return tuple((limits.text(p[0], f"{where}: exact_keys path", 2000), limits.text(p[1], f"{where}: exact_keys line",
                                                                                   2000)) for p in pairs)


def _list(x, where):
    if not isinstance(x, list):
        raise LoadError(f"{where}: expected a list, found {type(x).__name__}")
    return x


def _str(x, where):
    if not isinstance(x, str):
        raise LoadError(f"{where}: expected a string, found {type(x).__name__}")
    return x


def _str_or_none(x, where):
    return None if x is None else _str(x, where)


def _target(x, where):
    """A node's call target from its file text ("" for none)."""
    try:
        return as_target(_str(x, where))
    except CallTargetError as e:
        raise LoadError(f"{where}: {e}") from None
