"""A traced program -> the plain data the HTML viewer draws.

One entry per (module, method) graph, keyed ``"path:method"`` (``":forward"`` for the root).
Each graph lists its nodes: the inputs (with the input structure and the guards the
generated code checks), the ops (ATen name, call target, output dtype and shape, source line,
whether a ledger entry points at that line), parameter / buffer reads, submodule calls (which
name the callee's graph, drawn as a collapsible group) and the outputs. Edges are given per
node as the indices of the nodes producing its inputs.

Everything here may come from a crafted file (viewer/limits.py): each string a node shows is cut
to ``MAX_TEXT`` characters in one place (``_GraphDoc.add``), values are shown through a bounded
``repr``, a structure is described once per input or output and shown cut, and the graphs are
described from a work list (a program nested 900 modules deep is no recursion).
"""
from __future__ import annotations

from collections import deque

from ..ir import GUARD, Graph, TensorType, Value, iter_values, target_text
from ..ir.graph import _DTYPE_NAMES
from ..program import Program
from ..runtime.traced import program_of
from .limits import MAX_DAGRE_WORK, MAX_DRAWN, MAX_EXPAND_DEPTH, MAX_TEXT, clip, short_repr
from .sizes import value_dims


def type_text(t, dims=None) -> str:
    """``Float[2, 8, 32]``, ``int``; ``dims`` names the sizes (``("s0", "8", "32")``, sizes.py),
    else they are the trace's example sizes."""
    if isinstance(t, TensorType):
        name = _DTYPE_NAMES.get(t.dtype, str(t.dtype).replace("torch.", ""))
        return f"{name}[{', '.join(str(s) for s in (dims or t.shape))}]"
    return str(t) if t is not None else ""


def _const_text(c) -> str:
    return clip(short_repr(c), 60)


def _source(node_or_entry) -> str:
    """``file:line (function)``, each part cut first (a 4,096-character file name on each of 200,000 node
    descriptions would make a gigabyte page); together within MAX_TEXT."""
    s = node_or_entry.source
    if s is None:
        return ""
    return f"{clip(s.filename, 150)}:{clip(str(s.lineno), 20)}" + (f" ({clip(s.function, 60)})" if s.function else "")


class _GraphDoc:
    def __init__(self, program: "ProgramDoc", graph: Graph, key: str, module_path: str, module_type: str,
                 is_root: bool):
        self.program = program
        self.graph = graph
        self.nodes: list[dict] = []
        self.producer: dict[int, list] = {}   # id(Value) -> [index of the node making it, output slot]
        self.doc = {"key": key, "module": clip(module_path), "type": clip(module_type or graph.module_type or ""),
                    "method": graph.name, "nodes": self.nodes, "structures": []}
        self.is_root = is_root

    def type_of(self, v: Value) -> str:
        return type_text(v.type, self.program.dims.get(id(v)))

    def structure(self, spec, leaves) -> int | None:
        """The index in the graph's ``structures`` of ``spec`` described with ``leaves``' types (None for a
        plain leaf): each node of an input or the outputs names it, so it is written once per graph."""
        if spec.kind == "leaf":
            return None
        self.doc["structures"].append(clip(spec.describe(self.type_of(x) if isinstance(x, Value) else short_repr(x)
                                                         for x in leaves)))
        return len(self.doc["structures"]) - 1

    def add(self, kind: str, label: str, **fields) -> int:
        """Append a node; every string it shows is cut to MAX_TEXT characters here (the one place; ``call``
        is a graph's key, which names it, and is not shown)."""
        fields.update(kind=kind, label=label)
        for k, v in fields.items():
            if isinstance(v, str) and len(v) > MAX_TEXT and k != "call":
                fields[k] = clip(v)
        fields.setdefault("inputs", [])
        self.nodes.append(fields)
        return len(self.nodes) - 1

    def build(self) -> dict:
        g = self.graph
        leaves = iter(g.input_leaves)
        names = iter(g.arg_names)
        for pname, spec in zip(g.param_names, list(g.in_spec.children[0].children) +
                               list(g.in_spec.children[1].children)):
            mine = [(next(leaves), next(names)) for _ in range(spec.num_leaves)]
            # described once per parameter, in the graph's list (3,000 leaves of one list: once, not 3,000 times)
            structure = self.structure(spec, [x for x, _ in mine])
            for leaf, name in mine:
                if isinstance(leaf, Value):
                    guard = ("checked: is a Tensor" if isinstance(leaf.type, TensorType) else "checked: is an int") \
                        if self.is_root else ""
                    self.producer[id(leaf)] = [self.add("input", name, type=self.type_of(leaf), arg=pname,
                                                       structure=structure, guard=guard), 0]
                else:
                    self.add("input", name, type=_const_text(leaf), arg=pname, constant=True,
                             guard="checked: must equal the traced constant" if self.is_root else "")
        for v in g.inputs:
            if v.capture and id(v) not in self.producer:
                self.producer[id(v)] = [self.add("input", "captured", type=self.type_of(v)), 0]
        for node in g.nodes:
            self.op(node)
        # the output structure is described once (2,000 dict outputs: once, not 2,000 times)
        structure = self.structure(g.out_spec, g.outputs)
        for i, leaf in enumerate(g.outputs):
            ins = [self.producer[id(leaf)]] if isinstance(leaf, Value) and id(leaf) in self.producer else []
            self.add("output", f"output {i}", inputs=ins,
                     type=self.type_of(leaf) if isinstance(leaf, Value) else _const_text(leaf),
                     structure=structure)
        return self.doc

    def op(self, node) -> None:
        seen = []
        for v in node.input_values():
            p = self.producer.get(id(v))
            if p is not None and p not in seen:
                seen.append(p)
        ins = seen
        types = [self.type_of(v) for v in node.outputs if v is not None]
        src = _source(node)
        common = dict(inputs=ins, type=", ".join(types), source=src,
                      ledger=self.program.ledger_at(node.source))
        if node.op == "tracejit::get_attr":
            idx = self.add(node.attrs.get("kind", "parameter"), node.attrs["path"], op=node.op, **common)
        elif node.op == GUARD:
            a = node.attrs
            self.program.guard_count[a.get("kind", "?")] = self.program.guard_count.get(a.get("kind", "?"), 0) + 1
            idx = self.add("guard", f"guard {a.get('kind', '')}", op=node.op, inputs=ins, type="",
                           source=src, ledger=False, guard=f"{clip(str(a.get('what', '')))}: expects "
                                                             f"{clip(str(a.get('test')), 80)} "
                                                             f"{'holds' if a.get('expected') is True else '== ' + short_repr(a.get('expected'))}")
        elif node.op == "tracejit::constant":
            idx = self.add("constant", "constant", op=node.op, **common)
        elif node.op == "tracejit::call_module":
            callee_key = self.program.add_module_call(self.doc["module"], node, self.graph)
            args = [self.producer.get(id(a), None) if isinstance(a, Value) else None for a in node.args]
            idx = self.add("call", node.attrs["path"], op=f"{node.attrs['path']}.{node.attrs['method']}",
                           call=callee_key, args=args, **common)
        else:
            consts = [_const_text(a) for a in node.args if not isinstance(a, Value) and not list(iter_values(a))]
            idx = self.add("op", node.name, op=node.op, target=target_text(node.target), consts=consts[:6], **common)
        for slot, v in enumerate(node.outputs):
            if v is not None:
                self.producer[id(v)] = [idx, slot]


SIZES_NOTE = ("s0, s1, ...: input sizes the program accepts other values of (read at run time and not pinned by "
              "a guard, or moved in a probe on the meta device; as tracejit inspect shows them); a value's sizes "
              "are named after the ones they follow (s0*s1, 2*s0+1, ?: some other formula); numbers: the "
              "trace's example sizes")


class ProgramDoc:
    """Collects the graphs of a Program (tracejit/program.py) and its ledger."""

    def __init__(self, program: Program):
        self.program = program
        self.graphs: dict[str, dict] = {}
        self.ledger = list(program.ledger)
        self.guard_count: dict[str, int] = {}
        self.dims: dict[int, tuple] = {}   # id(Value) -> its sizes by name, where some are symbolic
        self._callee_keys: dict[tuple, str] = {}   # (id(module), method, id(graph)) -> key in graphs
        self._pending: deque = deque()   # callee graphs to describe: (key, graph, module path, module type)
        self._ledger_lines = {(e.source.filename, e.source.lineno) for e in self.ledger if e.source is not None}

    def ledger_at(self, source) -> bool:
        return source is not None and (source.filename, source.lineno) in self._ledger_lines

    def add_module_call(self, caller_path: str, node, caller) -> str:
        """The key of the callee's graph, described once per (module, method, graph): a module
        reachable by many paths is drawn once, under the first path that reaches it."""
        path = f"{caller_path}.{node.attrs['path']}" if caller_path else node.attrs["path"]
        module = self._module(path)
        callee = caller.callees.get((node.attrs["path"], node.attrs["method"]))
        if callee is None and module is not None:
            callee = module.method(node.attrs["method"])
        ident = (None if module is None else module.path, node.attrs["method"], id(callee))
        key = self._callee_keys.get(ident)
        if key is None:
            key = f"{path}:{node.attrs['method']}"
            while key in self.graphs:   # the same path with another graph (a specialization)
                key += "'"
            self._callee_keys[ident] = key
            self.graphs[key] = {}   # reserved; described from the work list (no recursion: 900 levels deep)
            self._pending.append((key, callee, path, "" if module is None else module.type_name))
        return key

    def _describe_pending(self) -> None:
        while self._pending:
            key, callee, path, type_name = self._pending.popleft()
            self.graphs[key] = _GraphDoc(self, callee, key, path, type_name, False).build()

    def _module(self, path: str):
        """The ModuleEntry at ``path`` (any of its paths: a shared module is one entry), or None."""
        entry = self.program.root
        for part in path.split("."):
            child = dict(entry.children).get(part)
            if child is None:
                return None
            entry = self.program.module(child)
        return entry

    def build(self) -> dict:
        program = self.program
        name, roots = program.name, list(program.root.methods)
        root_keys = []
        for _, graph in roots:
            self.dims.update(value_dims(program, graph))
        for method, graph in roots:
            key = f":{method}"
            root_keys.append(key)
            self.graphs[key] = _GraphDoc(self, graph, key, "", name, True).build()
            self._describe_pending()
        guards = ["each input is checked for its type, a constant input for its value"]
        guards += [f"{n} {kind} guard{'s' if n > 1 else ''} (orange nodes)" for kind, n in sorted(self.guard_count.items())]
        return {"name": clip(name), "kind": program.kind,
                "guards": guards,
                "roots": root_keys, "graphs": self.graphs,
                "node_count": sum(len(g["nodes"]) for g in self.graphs.values()),
                "sizes": SIZES_NOTE if self.dims else "",
                "limits": {"drawn": MAX_DRAWN, "dagre_work": MAX_DAGRE_WORK, "expand_depth": MAX_EXPAND_DEPTH},
                "ledger": [{"kind": clip(e.kind, 80), "message": clip(e.message), "source": _source(e),
                            "value": clip(short_repr(e.value), 80)} for e in self.ledger]}


def program_document(obj) -> dict:
    """The viewer's data for a Program, or a TracedModule / TracedFunction's."""
    return ProgramDoc(obj if isinstance(obj, Program) else program_of(obj)).build()
