"""TorchScript method graphs -> tracejit IR graphs, one per (module, method).

TorchScript archives keep no tensor types (a loaded graph says ``Tensor``), so conversion
runs alongside the example inputs: every TorchScript value is held twice, as its IR form
(a tracejit ``Value``, a Python constant, a submodule reference, or a tuple / list of those)
and as its real value on the example. Each op is run as it is converted; its result gives the
output types and checks the chosen Python call against the ATen op.

``prim::CallMethod`` on a submodule becomes a ``tracejit::call_module`` node and the callee's
method is converted into a graph of its own (once per submodule and method), so the module
hierarchy is kept.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import ops as op_facts
from ..ir import GUARD, Graph, Node, ScalarType, TensorType, Value, iter_values
from ..ir import target as call_target
from ..ir.guard_nodes import training_guard
from ..pytree import Spec, flatten, unflatten
from ..trace.ledger import LedgerEntry
from . import aten_call, prims
from .errors import MigrationError, describe_node, node_source

_INT_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "remainder": "%", "div": "/", "neg": "u-"}
_SCALAR_READS = {"Int": int, "IntImplicit": int, "Float": float, "FloatImplicit": float, "Bool": bool,
                 "ScalarImplicit": None}
_CAST_METHOD = {int: "long", float: "double", bool: "bool"}


@dataclass(frozen=True)
class ModuleRef:
    """A submodule as a TorchScript value: its path below the graph's owner, and the module."""
    path: str
    module: object


class Converter:
    """Converts the methods a module calls; ``graphs[id(script_module)][method]`` holds the results."""

    def __init__(self):
        self.graphs: dict[int, dict[str, Graph]] = {}
        self.ledger: list = []

    def method(self, module, name: str, path: str, args, root_training=None):
        """Convert ``module.name`` (the module at ``path``) called with ``args`` (a list of (ir, real)
        pairs, ir None for the root's inputs); returns (graph, real result)."""
        ts_graph = getattr(module, name).graph
        m = MethodConversion(self, module, name, path, ts_graph)
        return m.run(args, root_training)


class MethodConversion:
    def __init__(self, conv: Converter, module, name: str, path: str, ts_graph):
        self.conv = conv
        self.module = module
        self.path = path
        self.where = f"module {path or '(root)'!r}, method {name!r}"
        self.ts = ts_graph
        self.graph = Graph(name=name, module_type=getattr(module, "original_name", ""))
        self.env: dict[int, tuple] = {}

    # ---- inputs --------------------------------------------------------------------------------
    def run(self, args, root_training):
        g = self.graph
        ts_inputs = list(self.ts.inputs())
        if len(args) != len(ts_inputs) - 1:
            raise MigrationError(f"{self.where} takes {len(ts_inputs) - 1} arguments; {len(args)} example "
                                 "inputs were given")
        self.env[ts_inputs[0].unique()] = (ModuleRef("", self.module), self.module)
        arg_specs, leaves, names, params = [], [], [], []
        for inp, (ir, real) in zip(ts_inputs[1:], args):
            pname = inp.debugName().split(".")[0] or f"arg{len(params)}"
            real_leaves, spec = flatten(real)
            ir_leaves = flatten(ir)[0] if ir is not None else [None] * len(real_leaves)
            mine = []
            for k, (irl, rl) in enumerate(zip(ir_leaves, real_leaves)):
                hint = pname if spec.kind == "leaf" else f"{pname}_{k}"
                mine.append(self.input_leaf(irl, rl, hint, ir is None))
                names.append(hint)
            leaves.extend(mine)
            arg_specs.append(spec)
            params.append(pname)
            self.env[inp.unique()] = (unflatten(spec, mine), real)
        g.in_spec = Spec("tuple", None, (), (Spec("tuple", None, (), tuple(arg_specs)), Spec("dict", dict, (), ())))
        g.input_leaves = leaves
        g.arg_names = tuple(names)
        g.param_names = tuple(params)
        g.training = root_training
        if root_training is not None:
            self.guard_root_inputs(leaves)
        for node in self.ts.nodes():
            self.node(node)
        (ret,) = list(self.ts.outputs())
        ir, real = self.env[ret.unique()]
        out_leaves, g.out_spec = flatten(ir)
        for leaf in out_leaves:
            if isinstance(leaf, ModuleRef):
                raise MigrationError(f"{self.where} returns a module; only tensors and constants can be returned")
        g.outputs = out_leaves
        _drop_unused_scalar_tensors(g)
        return g, real

    def guard_root_inputs(self, leaves) -> None:
        """The guards a trace makes for a root method: its training flag, each tensor input's rank
        (the ops the archive holds were recorded for that rank)."""
        self.graph.nodes.append(_with_outputs(training_guard(self.graph.training)))
        for v in leaves:
            if isinstance(v, Value) and isinstance(v.type, TensorType):
                rank = len(v.type.shape)
                node = Node(GUARD, "", (v,), attrs={"kind": "rank", "test": "dim", "expected": rank, "seen": rank,
                                                    "what": f"input '{v.hint}' had {rank} dimensions in the "
                                                            "archive's trace", "line": ""}, effectful=True)
                self.graph.add_node(node, [])

    def input_leaf(self, ir, real, hint: str, is_root: bool):
        if is_root:
            if isinstance(real, torch.Tensor):
                return self.graph.add_input(TensorType.of(real), hint=hint, dynamic=True)
            if isinstance(real, int) and not isinstance(real, bool):
                return self.graph.add_input(ScalarType("int"), hint=hint, dynamic=True)
            return real
        if isinstance(ir, Value):
            return self.graph.add_input(ir.type, hint=hint, dynamic=ir.dynamic)
        return ir

    # ---- nodes ---------------------------------------------------------------------------------
    def at(self, node) -> str:
        return describe_node(node, self.where)

    def add(self, node_ir: Node, results: list, ts_node=None) -> list:
        """Append ``node_ir`` with one output per real result; return the output Values."""
        types = [_type_of(r) for r in results]
        dynamic = any(v.dynamic for v in node_ir.input_values())
        if ts_node is not None:
            node_ir.source = node_source(ts_node)
        self.graph.add_node(node_ir, types, dynamic)
        return node_ir.outputs

    def node(self, n) -> None:
        kind = n.kind()
        ins = [self.env[i.unique()] for i in n.inputs()]
        outs = list(n.outputs())
        handler = prims.HANDLERS.get(kind)
        if handler is not None or kind.startswith("aten::"):
            try:
                results = handler(self, n, ins) if handler is not None else self.aten(n, ins)
            except MigrationError:
                raise
            except (RuntimeError, TypeError, ValueError, IndexError) as e:
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise MigrationError(f"{self.at(n)}: running it on the example inputs failed ({first}); are the "
                                     "example inputs shaped like those the archive was traced with?") from None
        elif kind in ("prim::If", "prim::Loop"):
            raise MigrationError(f"{self.at(n)}: control flow from scripted code (torch.jit.script) has no "
                                 "tracejit form; trace that part of the model with tracejit.trace instead")
        else:
            raise MigrationError(f"{self.at(n)}: {kind} is not an ATen operator and has no tracejit form")
        if len(results) != len(outs):
            raise MigrationError(f"{self.at(n)}: produced {len(results)} values for {len(outs)} outputs")
        for o, r in zip(outs, results):
            self.env[o.unique()] = r

    def aten(self, n, ins) -> list:
        try:
            schema = torch._C.parse_schema(n.schema())
        except RuntimeError:
            raise MigrationError(f"{self.at(n)}: the operator has no schema in this torch "
                                 f"({torch.__version__})") from None
        name = op_facts.base_name(schema.name)
        overload = schema.overload_name
        if name in _SCALAR_READS and len(ins) == 1 and isinstance(ins[0][1], torch.Tensor):
            return [self.scalar_read(n, name, ins[0])]
        if not any("Tensor" in str(r.type) for r in schema.returns) \
                and not any(isinstance(r, torch.Tensor) for r in _flat_reals(ins)):
            return [self.scalar_op(n, schema, name, overload, ins)]
        return self.tensor_op(n, schema, name, overload, ins)

    def tensor_op(self, n, schema, name: str, overload: str, ins) -> list:
        op = f"aten::{name}.{overload}" if overload else f"aten::{name}"
        try:
            pos, kw = aten_call.split_arguments(schema, ins)
        except ValueError as e:
            raise MigrationError(f"{self.at(n)}: {e}") from None
        mutating = aten_call.is_mutating(schema)
        random = op_facts.draws_random(op, [p[1] for p in pos], {k: v[1] for k, v in kw.items()})
        reference = None
        if not mutating:
            packet = getattr(torch.ops.aten, name)
            ref_op = getattr(packet, overload or "default")
            ref_pos = [aten_call.enum_value(str(getattr(a, "real_type", a.type)), r)
                       for a, (_, r) in zip(schema.arguments, ins) if not a.kwarg_only]
            ref_kw = {a.name: aten_call.enum_value(str(getattr(a, "real_type", a.type)), r)
                      for a, (_, r) in zip(schema.arguments, ins) if a.kwarg_only}
            reference = ref_op(*ref_pos, **ref_kw)
        tried = []
        forms = aten_call.candidates(name, pos, kw) + aten_call.index_candidates(name, ins)
        for target, ir_args, ir_kwargs, fn, real_args, real_kwargs in forms:
            tried.append(str(target))
            try:
                result = fn(*real_args, **real_kwargs)
            except (TypeError, RuntimeError):
                continue
            if reference is not None and not (aten_call.same_kind(result, reference) if random
                                              else aten_call.same(result, reference)):
                continue
            node = Node(op, target, ir_args, ir_kwargs, effectful=mutating)
            return self.op_results(n, node, result, random)
        raise MigrationError(f"{self.at(n)}: no Python call to {op} reproduces it "
                             f"(tried {', '.join(dict.fromkeys(tried)) or 'nothing: no Python binding'})")

    def op_results(self, n, node: Node, result, random: bool) -> list:
        if random:
            node.attrs["nondeterministic"] = True
            self.conv.ledger.append(LedgerEntry("nondeterministic", f"random op {node.op}", node_source(n), None))
        if isinstance(result, (tuple, list)):
            node.attrs["unpack"] = len(result)
            values = self.add(node, list(result), n)
            ir = list(values) if isinstance(result, list) else tuple(values)
            if len(list(n.outputs())) == 1:
                return [(ir, result)]
            return list(zip(values, result))
        (v,) = self.add(node, [result], n)
        return [(v, result)]

    def scalar_read(self, n, name: str, item) -> tuple:
        """``aten::Int(t)`` and friends: the Python number in a one-element tensor."""
        ir, real = item
        want = _SCALAR_READS[name]
        made = ir.producer if isinstance(ir, Value) else None
        if made is not None and made.op == "aten::scalar_tensor" and want in (None, _python_kind(real)):
            return made.args[0], real.item()     # int(NumToTensor(n)) is n
        if want is not None and _python_kind(real) is not want:
            cast = _CAST_METHOD[want]
            real = getattr(real, cast)()
            (ir,) = self.add(Node("aten::to", call_target.method(cast), (ir,)), [real], n)
        value = real.item()
        (v,) = self.add(Node("aten::item", call_target.method("item"), (ir,)), [value], n)
        return v, value

    def scalar_op(self, n, schema, name: str, overload: str, ins) -> tuple:
        """An op on Python numbers: folded when all its inputs are constants, else an operator."""
        reals = [r for _, r in ins]
        packet = getattr(torch.ops.aten, name)
        value = getattr(packet, overload or "default")(*reals)
        if not any(isinstance(ir, Value) for ir, _ in ins):
            return value, value
        sym = _INT_OPERATORS.get(name)
        if sym is None or len(ins) != (1 if sym.startswith("u") else 2):
            raise MigrationError(f"{self.at(n)}: a size computation with aten::{name} has no tracejit form")
        op = f"aten::{name}.{overload}" if overload else f"aten::{name}"
        (v,) = self.add(Node(op, call_target.operator(sym), tuple(ir for ir, _ in ins)), [value], n)
        return v, value

    # ---- submodule calls -----------------------------------------------------------------------
    def call_method(self, n, ins) -> list:
        ref, _ = ins[0]
        if not isinstance(ref, ModuleRef):
            raise MigrationError(f"{self.at(n)}: calls a method of something that is not a submodule")
        name = n.s("name")
        args = ins[1:]
        sub = ref.module
        done = self.conv.graphs.setdefault(id(sub), {})
        if name in done:
            callee = done[name]
            real = getattr(sub, name)(*[r for _, r in args])
        else:
            callee, real = self.conv.method(sub, name, _join(self.path, ref.path), args)
            done[name] = callee
        plain = []
        for leaf, (ir_leaf, v) in zip(callee.input_leaves, _leaf_pairs(args)):
            if isinstance(leaf, Value):
                if not isinstance(ir_leaf, Value):
                    raise MigrationError(f"{self.at(n)}: passes the constant {ir_leaf!r} where another call "
                                         "passed a computed value")
                plain.append(ir_leaf)
            elif isinstance(ir_leaf, Value) or ir_leaf != leaf:
                raise MigrationError(f"{self.at(n)}: passes {ir_leaf!r} where the first call to "
                                     f"{ref.path}.{name} passed the constant {leaf!r}")
        node = Node("tracejit::call_module", "", plain,
                    attrs={"path": ref.path, "method": name, "n_captures": 0})
        self.graph.callees[(ref.path, name)] = callee
        real_leaves = flatten(real)[0]
        if len(real_leaves) != len(callee.outputs):
            raise MigrationError(f"{self.at(n)}: {ref.path}.{name} returned another structure than on its "
                                 "first call")
        values = self.add(node, real_leaves, n)
        return [(unflatten(callee.out_spec, values), real)]

    def get_attr(self, n, ins) -> list:
        ref, _ = ins[0]
        name = n.s("name")
        if not isinstance(ref, ModuleRef):
            raise MigrationError(f"{self.at(n)}: reads attribute {name!r} of something that is not a module")
        mod = ref.module
        path = _join(ref.path, name)
        children = dict(mod.named_children())
        if name in children:
            return [(ModuleRef(path, children[name]), children[name])]
        for kind, table in (("parameter", dict(mod.named_parameters(recurse=False))),
                            ("buffer", dict(mod.named_buffers(recurse=False)))):
            if name in table and table[name] is not None:
                t = table[name]
                (v,) = self.add(Node("tracejit::get_attr", "", attrs={"path": path, "kind": kind}), [t], n)
                return [(v, t)]
        value = getattr(mod, name)
        if isinstance(value, torch.Tensor):
            return [self.constant_tensor(n, value)]
        if value is None or isinstance(value, (bool, int, float, str)):
            return [(value, value)]
        raise MigrationError(f"{self.at(n)}: attribute {name!r} is a {type(value).__name__}, which tracejit "
                             "cannot hold as data")

    def constant_tensor(self, n, t: torch.Tensor) -> tuple:
        self.graph.constants.append(t.detach())
        (v,) = self.add(Node("tracejit::constant", "", attrs={"index": len(self.graph.constants) - 1}), [t], n)
        return v, t



def _with_outputs(node: Node) -> Node:
    node.outputs = []
    return node


def _drop_unused_scalar_tensors(g: Graph) -> None:
    """NumToTensor nodes whose only readers were bypassed by ``scalar_read``."""
    used = {id(v) for v in iter_values(g.outputs)}
    for node in g.nodes:
        used.update(id(v) for v in node.input_values())
    g.nodes = [n for n in g.nodes if not (n.op == "aten::scalar_tensor" and id(n.outputs[0]) not in used)]


def _type_of(x):
    if isinstance(x, torch.Tensor):
        return TensorType.of(x)
    if isinstance(x, bool):
        return ScalarType("bool")
    if isinstance(x, int):
        return ScalarType("int")
    if isinstance(x, float):
        return ScalarType("float")
    return None


def _python_kind(t: torch.Tensor):
    if t.dtype == torch.bool:
        return bool
    return float if (t.is_floating_point() or t.is_complex()) else int


def _flat_reals(ins):
    for _, r in ins:
        yield from flatten(r)[0]


def _leaf_pairs(args):
    for ir, real in args:
        yield from zip(flatten(ir)[0], flatten(real)[0])


def _join(a: str, b: str) -> str:
    return f"{a}.{b}" if a and b else a or b
