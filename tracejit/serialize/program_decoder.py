"""tracejit.load, part 2: the program document decoded into a Program (tracejit/program.py).

file -> (decode, upgrade old schemas, validate) -> Program -> runtime/assemble. Nothing here builds a
runtime object: the result is the same plain data a trace produces (module entries holding the file's
tensors, each method's Graph, the specializations, the ledger), every graph validated (validate.py,
schema_check.py), its weights checked against the types it was traced with, its submodule calls linked
in its ``Graph.callees`` (a graph the file shares between modules whose callees differ is decoded once per set of
callees), and what it may allocate per call planned (``Graph.call_budget``). Old schemas are upgraded here, not
in codegen (``upgrade``): a schema-1 root method gets the training guard node a trace makes today."""
from __future__ import annotations

from torch import nn

from ..errors import LoadError
from ..ir import GUARD, SourceLoc, Value
from ..program import ModuleEntry, Program, SpecializationEntry
from ..ir.guard_nodes import training_guard
from ..trace.ledger import LedgerEntry
from . import encode, limits
from .budget_plan import BudgetPlan, weights_of
from .document_checks import method_name
from ..lazy_module import LazyModule

# the per-op checks: not imported where every load hits the code cache (code_cache.py), which skips them
validate = LazyModule(".validate", __package__)

MAX_SPECIALIZATIONS = 256   # entries of the table (a live object keeps at most specialize.LIMIT per method)


def decode_function(program: dict, tensors: dict, budget: int, version: int, validated: bool = False) -> Program:
    """The Program of a saved function (``program``: the document's ``program`` object). ``validated``: this
    very document passed the checks in this tracejit before (serialize/code_cache.py): they are skipped."""
    methods = _pairs(program.get("methods"), "function")
    if [n for n, _ in methods] != ["forward"]:
        raise LoadError("a saved function must hold exactly one method, 'forward'")
    table = _GraphTable(program, tensors)
    g = table.get(methods[0][1], "function")
    if not validated:
        validate.check_graph(g, "function", None, None, budget)
        _checkweights_of(g, None, "function")
    name = program.get("name")
    if not isinstance(name, str):
        raise LoadError("malformed function name")
    BudgetPlan(budget, weights_of(tensors)).adopt(g)   # its code checks sizes that follow the inputs (support/call_budget.py)
    root = ModuleEntry("", name, False, methods=(("forward", g),))
    specs = _specializations(program, table, _Tree({"": root}), ("forward",), budget, function=True, validated=validated)
    return upgrade(Program("function", name, (root,), ("forward",), specs,
                           _ledger_entries(program.get("ledger", []))), version)


def decode_module(program: dict, tensors: dict, budget: int, version: int, validated: bool = False) -> Program:
    """The Program of a saved module: its module entries (root first), methods linked, specializations.
    ``validated``: as decode_function's."""
    entries = program.get("modules")
    if not isinstance(entries, list) or not entries:
        raise LoadError("the program holds no modules")
    by_path: dict[str, dict] = {}
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("path"), str):
            raise LoadError("malformed module entry")
        if e["path"] in by_path:
            raise LoadError(f"module {e['path']!r} is described twice")
        by_path[e["path"]] = e
    if "" not in by_path:
        raise LoadError("the program has no root module")
    tree = _Tree(_module_entries(by_path, tensors))
    tree.check_acyclic()
    table = _GraphTable(program, tensors)
    methods: dict[str, dict[str, int]] = {}
    for path, e in by_path.items():
        methods[path] = {}
        for name, idx in _pairs(e.get("methods", []), f"module {path}"):
            method_name(name, f"module {path!r} method", tree.names(path))
            methods[path][name] = idx
    plan = BudgetPlan(budget, weights_of(tensors))   # the generated code checks sizes that follow the inputs (call_budget.py)
    graphs: dict[str, dict] = {path: {} for path in tree.entries}
    linked: dict[tuple, object] = {}
    checked, ops = set(), {}   # graph indices validated; what each op name passed (validate._op_name), once a file
    adopted: set[int] = set()   # graphs linked in place (below)
    # deepest modules first, so a caller links to the graphs its submodules really run
    for path in sorted(methods, key=lambda p: -len(p.split(".")) if p else 0):
        for name, idx in methods[path].items():
            where = f"module {path or '(root)'}, method {name!r}"
            g = table.get(idx, where)

            def has_tensor(rel, kind, owner=path):
                return tree.tensor(owner, rel, kind) is not None

            def methods_of(rel, owner=path):
                at = tree.walk(owner, rel)
                return {} if at is None else methods[at]

            if not validated:
                if idx in checked:
                    validate.check_module_refs(g, where, has_tensor, methods_of)
                else:
                    validate.check_graph(g, where, has_tensor, methods_of, budget, ops, plan.bound_at_load)
                    checked.add(idx)
                _checkweights_of(g, lambda rel, kind, owner=path: tree.tensor(owner, rel, kind), where)
            callees = []
            for i, n in enumerate(g.nodes):
                if n.op == "tracejit::call_module":
                    callee = graphs[tree.walk(path, n.attrs["path"])][n.attrs["method"]]
                    _check_call(n, callee, f"{where}, node {i}")
                    callees.append(callee)
            # a graph shared by several modules or methods is one Graph when its callees are the same graphs
            # (compiled once: compile_once.py); with other callees (a ReLU here, an Identity there) it is
            # decoded again with its own links
            key = (idx, path == "", tuple(map(id, callees)))
            if key not in linked:
                # a schema-1 root method gets a guard node (upgrade): its own copy, never a graph it shares
                if callees and idx not in adopted:
                    # the first linking of a graph that calls submodules takes the Graph decoded for
                    # validation (nothing else is handed a graph with call_module nodes: specializations
                    # refuse them); later ones, with other callees, decode their own
                    adopted.add(idx)
                    g.callees = {(n.attrs["path"], n.attrs["method"]): c for n, c in
                                 zip((n for n in g.nodes if n.op == "tracejit::call_module"), callees)}
                    linked[key] = g
                elif callees or (path == "" and version < 2):
                    linked[key] = table.get(idx, where, callees)
                else:
                    linked[key] = g
                plan.adopt(linked[key])
            graphs[path][name] = linked[key]
    entries = tuple(_with_methods(e, graphs[e.path]) for e in tree.ordered())
    entry_points = tuple(graphs[""])
    specs = _specializations(program, table, tree, entry_points, budget, function=False, validated=validated)
    root_type = entries[0].type_name
    return upgrade(Program("module", root_type, entries, entry_points, specs,
                           _ledger_entries(program.get("ledger", []))), version)


def upgrade(program: Program, version: int) -> Program:
    """``program`` as a file of the current schema would describe it. Schema 1 had no guard nodes, so its
    root methods get the training guard a trace puts first (passes/pipeline.add_training_guard); schemas 1
    and 2 had no specializations table: they hold their first traces only."""
    if version >= 2:
        return program
    for name in program.entry_points:
        g = program.graph(name)
        if g.training is not None and not any(n.op == GUARD and n.attrs.get("test") == "training" for n in g.nodes):
            g.nodes.insert(0, training_guard(g.training))
    return program


def _with_methods(entry: ModuleEntry, graphs: dict) -> ModuleEntry:
    return ModuleEntry(entry.path, entry.type_name, entry.training, entry.parameters, entry.buffers,
                       entry.non_persistent, entry.children, tuple(graphs.items()))


class _Tree:
    """The module entries a file describes, walked by path (a shared module is one entry)."""

    def __init__(self, entries: dict):
        self.entries = entries   # path -> ModuleEntry (no methods yet)
        self.children = {p: dict(e.children) for p, e in entries.items()}

    def ordered(self) -> list:
        return sorted(self.entries.values(), key=lambda e: e.path != "")   # the root first

    def walk(self, path: str, rel: str):
        """The entry path of the module at dotted ``rel`` below the module at ``path``, or None."""
        for part in rel.split("."):
            path = self.children.get(path, {}).get(part)
            if path is None:
                return None
        return path

    def tensor(self, owner: str, rel: str, kind: str):
        """The parameter or buffer at dotted ``rel`` below the module at ``owner``, or None."""
        *mods, last = rel.split(".")
        at = self.walk(owner, ".".join(mods)) if mods else owner
        if at is None:
            return None
        e = self.entries[at]
        return dict(e.parameters if kind == "parameter" else e.buffers).get(last)

    def names(self, path: str) -> set:
        """The parameter, buffer and submodule names of the module at ``path``."""
        e = self.entries[path]
        return {n for n, _ in e.parameters} | {n for n, _ in e.buffers} | {n for n, _ in e.children}

    def check_acyclic(self) -> None:
        """Module trees may share modules but never contain themselves."""
        done: set[str] = set()

        def visit(at: str, path: str, stack: set[str]):
            if at in stack:
                raise LoadError(f"the module hierarchy has a cycle: {path!r} is one of its own ancestors "
                                f"(a {self.entries[at].type_name})")
            if at in done:
                return
            stack.add(at)
            for name, child in self.entries[at].children:
                if child is not None:
                    visit(child, f"{path}.{name}" if path else name, stack)
            stack.discard(at)
            done.add(at)

        visit("", "", set())


def _tensor(tensors: dict, key, where: str):
    if not isinstance(key, str) or key not in tensors:
        raise LoadError(f"{where}: refers to tensor {str(key)[:80]!r}, which the file does not hold")
    return tensors[key]


def _decode_graph(d, where: str, tensors: dict, callees=None):
    if not isinstance(d, dict):
        raise LoadError(f"{where}: malformed graph")
    g = encode.decode_graph(d, where, callees)
    consts = d.get("constants", [])
    if not isinstance(consts, list):
        raise LoadError(f"{where}: malformed constants")
    g.constants = [_tensor(tensors, k, where) for k in consts]
    return g


class _GraphTable:
    """Decodes each stored graph once; hands out its Graph (with constants) by index."""

    def __init__(self, program: dict, tensors: dict):
        table = program.get("graphs")
        if not isinstance(table, list):
            raise LoadError("the program has no graph table")
        self.raw = table
        self.tensors = tensors
        self.decoded: dict[int, object] = {}

    def get(self, idx, where: str, callees: list | None = None):
        """The Graph at ``idx`` (decoded once), for validation. With ``callees`` (the graph each
        call_module node calls, in node order): a private copy whose calls link to them."""
        if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < len(self.raw):
            raise LoadError(f"{where}: graph index {idx!r} is not in the graph table")
        if callees is not None:
            return _decode_graph(self.raw[idx], f"{where} (graph {idx})", self.tensors, callees)
        if idx not in self.decoded:
            self.decoded[idx] = _decode_graph(self.raw[idx], f"{where} (graph {idx})", self.tensors)
        return self.decoded[idx]


def _specializations(program: dict, table: _GraphTable, tree: _Tree, methods: tuple, budget: int,
                     function: bool, validated: bool) -> tuple:
    """The ``specializations`` table (serialize/specializations.py), each graph validated like a root method's."""
    entries = program.get("specializations", [])
    if not isinstance(entries, list):
        raise LoadError("the specializations table is malformed (expected a list)")
    if len(entries) > MAX_SPECIALIZATIONS:
        raise LoadError(f"the program has {len(entries)} specializations (at most {MAX_SPECIALIZATIONS})")
    raw = program.get("graphs") or []
    visits = sum(len(raw[e["graph"]].get("nodes") or ()) for e in entries if isinstance(e, dict)
                 and isinstance(e.get("graph"), int) and 0 <= e["graph"] < len(raw) and isinstance(raw[e["graph"]], dict))
    if visits > limits.MAX_NODE_VISITS:   # a big graph named by many entries: bound the checking work
        raise LoadError(f"the specializations add up to {visits} nodes to check (at most {limits.MAX_NODE_VISITS})")
    has_tensor = None if function else (lambda rel, kind: tree.tensor("", rel, kind) is not None)
    out, named = [], {}   # named: graph index -> the entry that named it first
    for k, e in enumerate(entries):
        where = f"specialization {k}"
        if not isinstance(e, dict) or set(e) - {"method", "graph", "reason", "source"}:
            raise LoadError(f"{where}: malformed entry (expected method, graph, reason, source)")
        method = e.get("method")
        if not isinstance(method, str) or method not in methods:
            raise LoadError(f"{where}: names method {str(method)[:60]!r}, which the program does not trace "
                            f"(it traces {sorted(methods)})")
        where = f"{where} of {method!r}"
        reason = limits.text(e.get("reason"), f"{where} reason")
        source = _source(e.get("source"), where)
        if type(e.get("graph")) is int and named.setdefault(e["graph"], k) != k:   # a repeat: 14 s (round 26)
            raise LoadError(f"{where}: names graph {e['graph']}, which specialization {named[e['graph']]} names too")
        g = table.get(e.get("graph"), where)
        if any(n.op == "tracejit::call_module" for n in g.nodes):
            raise LoadError(f"{where}: a specialization's graph must have its submodule calls inlined; it calls "
                            "a submodule method")
        if not validated:
            validate.check_graph(g, where, has_tensor, lambda rel: {}, budget)
            _checkweights_of(g, None if function else (lambda rel, kind: tree.tensor("", rel, kind)), where)
        BudgetPlan(budget, weights_of(table.tensors)).adopt(g)   # a file's program: call-time budget checks (call_budget.py)
        out.append(SpecializationEntry(method, g, reason, source))
    return tuple(out)


def _source(src, where: str):
    if src is None:
        return None
    if not (isinstance(src, list) and len(src) == 3 and isinstance(src[0], str) and isinstance(src[1], int)
            and not isinstance(src[1], bool)):
        raise LoadError(f"{where}: malformed source (expected [file, line, function])")
    return SourceLoc(limits.text(src[0], f"{where} source"), src[1], limits.text(src[2], f"{where} source"))


def _ledger_entries(items) -> tuple:
    out = []
    if not isinstance(items, list):
        raise LoadError("malformed ledger")
    for e in items:
        if not isinstance(e, dict) or not isinstance(e.get("kind"), str) or not isinstance(e.get("message"), str):
            raise LoadError("malformed ledger entry")
        limits.text(e["kind"], "ledger entry kind", 200)
        limits.text(e["message"], "ledger entry message")
        src = e.get("source")
        source = None
        if src is not None:
            if not (isinstance(src, list) and len(src) == 3 and isinstance(src[0], str) and isinstance(src[1], int)
                    and not isinstance(src[1], bool)):
                raise LoadError("malformed ledger entry source (expected [file, line, function])")
            source = SourceLoc(limits.text(src[0], "ledger entry source"), src[1],
                               limits.text(src[2], "ledger entry source"))
        out.append(LedgerEntry(e["kind"], e["message"], source, limits.ledger_value(e.get("value"), "ledger entry value")))
    return tuple(out)


def _check_call(node, callee, at: str) -> None:
    """A call_module node must pass what the callee takes and receive what it returns."""
    n_caps = sum(1 for v in callee.inputs if v.capture)
    if len(node.args) != len(callee.inputs) or node.attrs["n_captures"] != n_caps:
        raise LoadError(f"{at}: passes {len(node.args)} arguments ({node.attrs['n_captures']} captured) to a method "
                        f"that takes {len(callee.inputs)} arguments ({n_caps} captured)")
    for a, v in zip(node.args, callee.inputs):
        if not isinstance(a, Value) or hasattr(a.type, "shape") != hasattr(v.type, "shape"):
            raise LoadError(f"{at}: an argument does not match the callee's input kind")
    if len(node.outputs) != len(callee.outputs):
        raise LoadError(f"{at}: receives {len(node.outputs)} values from a method that returns {len(callee.outputs)}")


def _module_entries(by_path: dict, tensors: dict) -> dict:
    """``{path: ModuleEntry}`` (no methods yet): the file's module entries checked and read."""
    shared: dict = {}   # one nn.Parameter per stored tensor, so parameters shared at save time stay shared
    entries = {}
    for path, e in by_path.items():
        where = f"module {path or '(root)'}"
        type_name = _type_name(e.get("type"), where)
        params = []
        for n, p in _pairs(e.get("parameters", []), where):
            if p is None:
                params.append((n, None))
                continue
            if not isinstance(p, dict):
                raise LoadError(f"{where}: malformed parameter {n!r}")
            t = _tensor(tensors, p.get("tensor"), f"{where}, parameter {n!r}")
            params.append((n, _parameter(t, bool(p.get("requires_grad", True)), shared, p.get("tensor"))))
        buffers = [(n, None if key is None else _tensor(tensors, key, f"{where}, buffer {n!r}"))
                   for n, key in _pairs(e.get("buffers", []), where)]
        nonp = e.get("non_persistent", [])
        if not isinstance(nonp, list):
            raise LoadError(f"{where}: malformed non_persistent list")
        children = _pairs(e.get("children", []), f"module {path}")
        for n, child in children:
            if child is not None and (not isinstance(child, str) or child not in by_path):
                raise LoadError(f"module {path!r} names a child {str(child)[:60]!r} that the file does not describe")
        entries[path] = ModuleEntry(path, type_name, bool(e.get("training", False)), tuple(params), tuple(buffers),
                                    frozenset(str(x) for x in nonp), tuple((n, child) for n, child in children))
    return entries


def _checkweights_of(g, tensor_at, where: str) -> None:
    """Parameters, buffers and constants must have the dtype and shape the graph was traced with
    (``tensor_at(path, kind)``: the module's tensor at ``path``; None for a function)."""
    for i, node in enumerate(g.nodes):
        if node.op == "tracejit::get_attr":
            t = tensor_at(node.attrs["path"], node.attrs["kind"])
        elif node.op == "tracejit::constant":
            t = g.constants[node.attrs["index"]]
        else:
            continue
        want = node.outputs[0].type if node.outputs and node.outputs[0] is not None else None
        if want is None or not hasattr(want, "shape"):
            raise LoadError(f"{where}, node {i}: {node.op} has no tensor type")
        if t.dtype != want.dtype or tuple(t.shape) != tuple(want.shape):
            raise LoadError(f"{where}, node {i}: {node.attrs.get('path', 'constant')} is stored as "
                            f"{str(t.dtype).replace('torch.', '')}{list(t.shape)} but the graph was traced with "
                            f"{str(want.dtype).replace('torch.', '')}{list(want.shape)}")


def _parameter(t, requires_grad: bool, cache: dict, key) -> nn.Parameter:
    if key in cache:
        return cache[key]
    p = nn.Parameter(t, requires_grad=requires_grad and (t.is_floating_point() or t.is_complex()))
    cache[key] = p
    return p


def _type_name(name, where) -> str:
    if not isinstance(name, str) or not name or len(name) > 200:
        raise LoadError(f"{where}: bad module type name")
    return name


def _pairs(x, where) -> list:
    """A list of [name, value] pairs with distinct string names."""
    if not isinstance(x, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in x):
        raise LoadError(f"{where}: expected a list of [name, value] pairs")
    names = [p[0] for p in x]
    if len(set(names)) != len(names):
        raise LoadError(f"{where}: a name appears twice")
    for n in names:
        if not n or len(n) > 200 or "." in n:
            raise LoadError(f"{where}: bad name {n[:60]!r}")
    return x
