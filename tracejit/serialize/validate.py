"""Validation of a loaded program: every op resolved against torch's operator registry,
every call target on an allowlist, every name that reaches generated code an ASCII identifier,
every argument type-checked against the op's schema (schema_check.py).

Nothing here imports, evaluates or looks up a name chosen by the file outside these lists.
"""
from __future__ import annotations

import types

import torch

from ..errors import LoadError
from ..ir import Graph, Value, target_text, verify, VerificationError
from ..ops import schemas_of
from ..ops.names import CALL_MODULE, CONSTANT, GET_ATTR
from ..trace import ops as opnames
from . import capture_ops, custom_op_checks, op_allowlist, op_checks, op_dims, rng_ops, schema_check, size_rules, sym_ops
from .guards import check_guard
from ..patterns import split_op_name
from .document_checks import check_attrs, identifier, method_name  # noqa: F401  (the checks decoding makes)

NAMESPACES = ("aten",)
CUSTOM_NAMESPACES = frozenset(custom_op_checks.namespaces())   # reviewed custom ops only (custom_op_checks.py)
TRACEJIT_OPS = {GET_ATTR, CONSTANT, CALL_MODULE}
OPERATORS = {"+", "-", "*", "/", "//", "%", "**", "@", "&", "|", "^", "<<", ">>", "==", "!=", "<", "<=", ">", ">=",
             "r+", "r*", "r-", "r/", "r//", "r%", "r**", "r@", "r&", "r|", "r^", "u-", "u+", "u~"}
INDEX_KINDS = {"select", "slice", "index", "setitem_index"}
INDEX_ARGS = {"select": 3, "slice": 5, "index": 2, "setitem_index": 3}   # tensor, dim or spec, the rest
# call targets: the namespaces a file may name, as they are reached from the torch package
FUNCTION_NAMESPACES = {"torch": torch, "torch._C._VariableFunctions": torch._C._VariableFunctions,
                       "torch._C._nn": torch._C._nn, "torch._C._linalg": torch._C._linalg,
                       "torch._C._special": torch._C._special, "torch._C._fft": torch._C._fft}
# builtins that reach outside the tensor world (files, global state, raw memory)
DENIED = {"from_file", "set_", "data_ptr", "untyped_storage", "storage", "_set_", "share_memory_", "set_flush_denormal",
          "save", "load", "_assert_async", "record_stream", "pin_memory", "_make_subclass", "resize_",
          "set_num_threads", "manual_seed", "seed", "set_default_dtype", "set_grad_enabled"}
DEFAULT_MAX_ELEMENTS = 2 ** 25


def check_graph(graph: Graph, where: str, module_tree, methods_of,
                max_elements: int = DEFAULT_MAX_ELEMENTS, ops: dict | None = None, bindings: dict | None = None) -> None:
    """Validate one decoded graph. ``module_tree(path)`` describes the module it belongs to
    (or None for a function); ``methods_of(path)`` lists the traced methods of a module. ``ops``: a memo of what
    op names passed (``_op_name``), shared by the graphs of one file (one per call when not given). ``bindings``:
    where each ATen node named with its overload leaves ``(node, bound arguments, size rule)`` by ``id(node)``, for
    the call-time budget plan (budget_plan.BudgetPlan.bound_at_load), which would bind them again."""
    try:
        verify(graph)
    except VerificationError as e:
        raise LoadError(f"{where}: invalid graph: {e}") from None
    if not isinstance(graph.name, str) or len(graph.name) > 200:
        raise LoadError(f"{where}: bad graph name")
    for name in graph.arg_names + graph.param_names:
        if not isinstance(name, str) or not name or len(name) > 200:
            raise LoadError(f"{where}: bad argument name {str(name)[:60]!r}")
    if graph.in_spec.kind != "tuple" or len(graph.in_spec.children) != 2 or graph.in_spec.children[1].kind != "dict":
        raise LoadError(f"{where}: the input structure must be (args, kwargs)")
    for k in graph.in_spec.children[1].keys:
        identifier(k, f"{where}, keyword argument")
    n_leaves = graph.in_spec.num_leaves
    if len(graph.input_leaves) != n_leaves or len(graph.arg_names) != n_leaves:
        raise LoadError(f"{where}: the input structure has {n_leaves} leaves but {len(graph.input_leaves)} are described")
    named = [id(v) for v in graph.input_leaves if isinstance(v, Value)]
    regular = [id(v) for v in graph.inputs if not v.capture]
    if len(set(named)) != len(named) or set(named) != set(regular):
        raise LoadError(f"{where}: the input leaves must name each graph input exactly once")
    if len(graph.param_names) != len(graph.in_spec.children[0].children) + len(graph.in_spec.children[1].children):
        raise LoadError(f"{where}: parameter names do not match the input structure")
    if graph.out_spec.num_leaves != len(graph.outputs):
        raise LoadError(f"{where}: the output structure does not match the outputs")
    ops = {} if ops is None else ops   # op -> what its name alone passed (``_op_name``): once, not per node
    for i, node in enumerate(graph.nodes):
        check_node(node, f"{where}, node {i} ({str(node.op)[:60]})", graph, module_tree, methods_of, max_elements,
                   ops, bindings)


def check_module_refs(graph: Graph, where: str, module_tree, methods_of) -> None:
    """The checks that depend on the module a (structurally checked) graph is installed on."""
    for i, node in enumerate(graph.nodes):
        if node.op in (GET_ATTR, CALL_MODULE):
            _check_tracejit_node(node, f"{where}, node {i} ({node.op})", graph, module_tree, methods_of)


def check_node(node, at: str, graph: Graph, module_tree, methods_of,
               max_elements: int = DEFAULT_MAX_ELEMENTS, ops: dict | None = None, bindings: dict | None = None) -> None:
    """Validate one node. ``ops``: a memo of ``_op_name``'s answers by op string (check_graph's, one per graph);
    ``bindings``: check_graph's."""
    op = node.op
    capture_ops.check_node_attrs(node, at)
    if op in capture_ops.OPS:
        capture_ops.check_node(node, at)
        return
    if op == "tracejit::guard":
        return check_guard(node, at)
    if op in sym_ops.OPS:
        return sym_ops.check_node(node, at)
    if op in rng_ops.OPS:
        return rng_ops.check_node(node, at)
    if op in TRACEJIT_OPS:
        _check_tracejit_node(node, at, graph, module_tree, methods_of)
        return
    facts = ops.get(op) if ops is not None and isinstance(op, str) else None
    if facts is None:
        facts = _op_name(op, at)
        if ops is not None and facts[0] not in CUSTOM_NAMESPACES:
            ops[op] = facts
    ns, name, overload, fam, schema = facts
    if ns in CUSTOM_NAMESPACES:   # torchvision's nms / roi_align (ops/custom.py)
        return custom_op_checks.check_node(node, at, ns, name, overload, max_elements)
    if schema is not None:
        bound = schema_check.check_arguments(name, schema, node, at)
    else:
        schema, bound = _any_fitting_schema(name, node, at)
    fam.check(name, bound, at)
    _check_written(schema, bound, at)
    op_dims.check_dims(name, bound, node, at)
    bound = size_rules.with_unpack(name, bound, node)
    rule = size_rules.rule_for(name, bound)
    if rule is not None:
        op_checks.check_sizes(rule, name, bound, at, max_elements)
    _check_outputs(node, at, schema)
    if "unpack" in node.attrs and node.attrs["unpack"] != len(node.outputs):
        raise LoadError(f"{at}: unpacks {node.attrs['unpack']} values into {len(node.outputs)} outputs")
    if name not in opnames.aten_names_for_target(node.target):
        raise LoadError(f"{at}: its call target {target_text(node.target)[:60]!r} does not carry out aten::{name}")
    _check_target(node, at, name)
    if bindings is not None and overload is not None:   # passed: the one schema its overload names, bound
        bindings[id(node)] = (node, bound, rule)


def _op_name(op, at: str) -> tuple:
    """``(namespace, name, overload, family, schema)``: what an op's name alone must pass, whatever its node's
    arguments: a well-formed name in an allowed namespace, an ATen operator of this torch on the allow-list and not
    refused by name, its overload (when named) one torch has (``schema``: that overload's; None: any of the op's
    that fits). A reviewed custom op's namespace: ``(ns, name, overload, None, None)``, checked per node
    (custom_op_checks.py). Raises LoadError naming ``at``."""
    parts = split_op_name(op)   # namespace::name(.overload): lowercase namespace, ASCII identifiers
    if parts is None:
        raise LoadError(f"{at}: malformed op name")
    ns, name, overload = parts
    if ns in CUSTOM_NAMESPACES:   # torchvision's nms / roi_align (ops/custom.py)
        return ns, name, overload, None, None
    if ns not in NAMESPACES:
        raise LoadError(f"{at}: op namespace {ns!r} is not allowed (allowed: "
                        f"{', '.join(NAMESPACES + tuple(sorted(CUSTOM_NAMESPACES)))})")
    packet = opnames.aten_packet(name)
    if packet is None:
        raise LoadError(f"{at}: there is no operator aten::{name} in this torch ({torch.__version__})")
    fam = op_allowlist.family(name)
    if fam is None:
        raise LoadError(f"{at}: aten::{name} is not on the allow-list of ops a file may name "
                        "(tracejit/serialize/op_allowlist.py)")
    schema_check.check_op_name(name, at)
    schema = None
    if overload is not None:
        found = schemas_of(f"aten::{name}.{overload}")   # that overload alone: torch makes no object for the others
        schema = found[0][1] if found else None
        if schema is None:
            raise LoadError(f"{at}: aten::{name} has no overload {overload!r}")
    return ns, name, overload, fam, schema


def _any_fitting_schema(name: str, node, at: str):
    """A node recorded without an overload must still fit one of the op's schemas."""
    first = None
    for _, schema in schemas_of(f"aten::{name}"):
        if any(a.name == "out" for a in schema_check.arguments(schema)):
            continue
        try:
            return schema, schema_check.check_arguments(name, schema, node, at)
        except LoadError as e:
            first = first or e
    raise first or LoadError(f"{at}: aten::{name} has no schema its arguments fit")


def _check_written(schema, bound: dict, at: str) -> None:
    """An argument an op writes other than ``self`` (``out=`` of an .out overload, ``values`` / ``indices`` ...)
    writes and resizes the tensor it names: it must be one the program made, not an input of the call, a
    parameter, a buffer or a constant of the file (round 25: a file's ``torch.mul(x, 2.0, out=x)`` wrote into,
    and could resize, its caller's tensor; a traced ``torch.mul(x, 2, out=buf)`` with ``buf`` made in the
    program stays as it is)."""
    for a in schema_check.arguments(schema):
        if not a.writes or a.name == "self":
            continue
        v = bound.get(a.name)
        producer = v.producer if isinstance(v, Value) else None
        if isinstance(v, Value) and (producer is None or producer.op in (GET_ATTR, CONSTANT)):
            what = "an input of the call" if producer is None else f"a {producer.attrs.get('kind', 'constant')} " \
                f"of the file"
            raise LoadError(f"{at}: its {a.name}= names {what}; a program loaded from a file may write with "
                            f"{a.name}= only into a tensor it made itself")


_RETURNS: dict = {}   # id(schema) -> (schema, its return types as text): read once per schema, not per node


def _check_outputs(node, at: str, schema) -> None:
    hit = _RETURNS.get(id(schema))
    if hit is None or hit[0] is not schema:
        hit = _RETURNS[id(schema)] = (schema, [str(r.type) for r in schema.returns])
    returns = hit[1]
    n = len(node.outputs)
    if len(returns) == 1 and returns[0].startswith("List["):
        if "unpack" not in node.attrs:
            raise LoadError(f"{at}: an op returning a list must unpack it")
        return
    if n != len(returns) and not (n == 1 and node.outputs[0] is None and not returns):
        raise LoadError(f"{at}: {n} outputs, but the op returns {len(returns)}")


def _check_target(node, at: str, aten_name: str) -> None:
    target = node.target
    kind, what = target.kind, target.name   # an aten node without a target failed the check above
    if kind == "op":
        if what not in OPERATORS:
            raise LoadError(f"{at}: unknown operator {what!r}")
        want = 1 if what.startswith("u") else 2
        if len(node.args) != want or node.kwargs:
            raise LoadError(f"{at}: operator {what!r} takes {want} argument(s)")
        return
    if kind == "index":
        if what not in INDEX_KINDS:
            raise LoadError(f"{at}: unknown indexing form {what!r}")
        if not node.args or not isinstance(node.args[0], Value) or not hasattr(node.args[0].type, "shape"):
            raise LoadError(f"{at}: indexing needs a tensor")
        want = INDEX_ARGS[what]
        if len(node.args) != want or node.kwargs:   # the code generator reads exactly these (codegen/nodes.py)
            raise LoadError(f"{at}: indexing form {what!r} takes {want} arguments; the node has {len(node.args)}"
                            f"{' and keyword arguments' if node.kwargs else ''}")
        rank = len(node.args[0].type.shape)
        spec = node.args[1] if len(node.args) > 1 else None
        if what in ("select", "slice"):
            if not isinstance(spec, int) or isinstance(spec, bool) or not 0 <= spec < max(rank, 1):
                raise LoadError(f"{at}: indexes dimension {str(spec)[:20]} of a tensor with {rank} dimensions")
        elif not isinstance(spec, list) or len(spec) > rank:
            raise LoadError(f"{at}: indexes {len(spec) if isinstance(spec, list) else 'malformed'} dimensions "
                            f"of a tensor with {rank}")
        return
    if kind == "attr":
        if what not in opnames.TENSOR_PROPERTIES:
            raise LoadError(f"{at}: unknown tensor property {what!r}")
        return
    if kind == "method":
        identifier(what, at)
        fn = getattr(torch._C.TensorBase, what, None)
        if what in DENIED or not isinstance(fn, (types.MethodDescriptorType, types.WrapperDescriptorType)):
            raise LoadError(f"{at}: Tensor.{what} is not a tensor operation tracejit may call")
        if not node.args or not isinstance(node.args[0], Value) or not hasattr(node.args[0].type, "shape"):
            raise LoadError(f"{at}: a method call needs a tensor first argument")
        return
    if kind == "fn":
        name = target.short_name
        module = FUNCTION_NAMESPACES.get(target.namespace)
        identifier(name, at)
        fn = getattr(module, name, None) if module is not None else None
        if name in DENIED or not isinstance(fn, types.BuiltinFunctionType):
            raise LoadError(f"{at}: {what} is not an operator function tracejit may call")
        return
    raise LoadError(f"{at}: unknown call target {target_text(target)[:60]!r}")


def _check_tracejit_node(node, at: str, graph: Graph, module_tree, methods_of) -> None:
    attrs = node.attrs
    if len(node.outputs) != 1 and node.op != "tracejit::call_module":
        raise LoadError(f"{at}: {node.op} has exactly one output, this node lists {len(node.outputs)} outputs")
    if node.op != "tracejit::call_module" and not hasattr(node.outputs[0].type if node.outputs[0] else None, "shape"):
        raise LoadError(f"{at}: {node.op} must define a tensor")
    if node.op == "tracejit::constant":
        idx = attrs.get("index")
        if not isinstance(idx, int) or not 0 <= idx < len(graph.constants):
            raise LoadError(f"{at}: constant index {idx!r} out of range")
        if node.args or node.kwargs:
            raise LoadError(f"{at}: a constant takes no arguments")
        return
    path = attrs.get("path")
    if not isinstance(path, str) or not path:
        raise LoadError(f"{at}: missing path")
    for part in path.split("."):
        if not part or len(part) > 200:
            raise LoadError(f"{at}: bad path {path[:80]!r}")
    if node.op == "tracejit::get_attr":
        if attrs.get("kind") not in ("parameter", "buffer") or node.args or node.kwargs:
            raise LoadError(f"{at}: malformed get_attr")
        if module_tree is None or not module_tree(path, attrs["kind"]):
            raise LoadError(f"{at}: the module has no {attrs['kind']} {path!r}")
        return
    method = method_name(attrs.get("method"), at)
    n = attrs.get("n_captures")
    if not isinstance(n, int) or n < 0 or n > len(node.args):
        raise LoadError(f"{at}: bad capture count")
    if methods_of is None or method not in methods_of(path):
        raise LoadError(f"{at}: calls {path}.{method}, which the file does not define")
