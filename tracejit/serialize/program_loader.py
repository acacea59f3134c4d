"""tracejit.load, part 2: the program. Decodes the graph table once, validates each graph
(validate.py, schema_check.py), rebuilds the module tree with its weights, links submodule calls
and compiles each method with the same code generator tracing uses.
"""
from __future__ import annotations

from torch import nn

from ..errors import LoadError
from ..ir import SourceLoc, Value
from ..program import ModuleEntry
from ..runtime import assemble
from ..runtime.traced import TracedFunction, TracedModule
from ..trace.ledger import LedgerEntry
from ..runtime import specialize
from . import encode, limits, specializations, validate
from .budget_plan import BudgetPlan
from .compile_once import MethodCompiler

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
        out.append(LedgerEntry(e["kind"], e["message"], source, e.get("value")))
    return tuple(out)


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
        call_module node calls, in node order): a private copy whose calls link to them, to compile."""
        if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < len(self.raw):
            raise LoadError(f"{where}: graph index {idx!r} is not in the graph table")
        if callees is not None:
            return _decode_graph(self.raw[idx], f"{where} (graph {idx})", self.tensors, callees)
        if idx not in self.decoded:
            self.decoded[idx] = _decode_graph(self.raw[idx], f"{where} (graph {idx})", self.tensors)
        return self.decoded[idx]


def load_function(program: dict, tensors: dict, budget: int) -> TracedFunction:
    methods = _pairs(program.get("methods"), "function")
    if [n for n, _ in methods] != ["forward"]:
        raise LoadError("a saved function must hold exactly one method, 'forward'")
    table = _GraphTable(program, tensors)
    g = table.get(methods[0][1], "function")
    validate.check_graph(g, "function", None, None, budget)
    _check_weights(g, None, "function")
    name = program.get("name")
    if not isinstance(name, str):
        raise LoadError("malformed function name")
    g.call_budget = BudgetPlan(budget)   # its code checks sizes that follow the inputs (support/call_budget.py)
    out = TracedFunction(name, g, _ledger_entries(program.get("ledger", [])))
    specialize.enable_for_function(out, None)   # no original: the file's specializations, chosen per call
    specializations.load_table(program, table, out, budget, None, None, _check_weights)
    return out


def load_module(program: dict, tensors: dict, budget: int) -> TracedModule:
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
    made = _build_modules(by_path, tensors)
    table = _GraphTable(program, tensors)
    methods: dict[str, dict[str, int]] = {}
    for path, e in by_path.items():
        methods[path] = {}
        for name, idx in _pairs(e.get("methods", []), f"module {path}"):
            validate.method_name(name, f"module {path!r} method", made[path])
            methods[path][name] = idx
    root = made[""]
    compiled: dict[str, dict] = {path: {} for path in made}
    plan = BudgetPlan(budget)   # the generated code checks sizes that follow the inputs (support/call_budget.py)
    compiler = MethodCompiler()
    linked: dict[tuple, object] = {}
    checked: set[int] = set()
    # deepest modules first, so a caller links to the graphs its submodules really run
    path_of = {id(m): p for p, m in made.items()}
    for path in sorted(methods, key=lambda p: -len(p.split(".")) if p else 0):
        named = methods[path]
        owner = made[path]
        for name, idx in named.items():
            where = f"module {path or '(root)'}, method {name!r}"
            g = table.get(idx, where)

            def has_tensor(rel, kind, owner=owner):
                *mods, last = rel.split(".")
                m = owner
                for part in mods:
                    m = m._modules.get(part)
                    if m is None:
                        return False
                store = m._parameters if kind == "parameter" else m._buffers
                return store.get(last) is not None

            def methods_of(rel, owner=owner):
                m = _walk(owner, rel)
                return {} if m is None else methods[path_of[id(m)]]

            if idx in checked:
                validate.check_module_refs(g, where, has_tensor, methods_of)
            else:
                validate.check_graph(g, where, has_tensor, methods_of, budget)
                checked.add(idx)
            _check_weights(g, owner, where)
            callees = []
            for i, n in enumerate(g.nodes):
                if n.op == "tracejit::call_module":
                    callee = compiled[path_of[id(_walk(owner, n.attrs["path"]))]][n.attrs["method"]].graph
                    _check_call(n, callee, f"{where}, node {i}")
                    callees.append(callee)
            # a graph shared by several modules or methods is compiled once when its callees are the same
            # graphs (compile_once.py); with other callees (a ReLU here, an Identity there) it is decoded
            # again with its own links
            key = (idx, path == "", tuple(map(id, callees)))
            if key not in linked:
                linked[key] = table.get(idx, where, callees) if callees else g
                linked[key].call_budget = plan
            compiled[path][name] = compiler.method(idx, linked[key], name, path == "", tuple(callees))
    assemble.install(made, compiled)
    root.ledger = _ledger_entries(program.get("ledger", []))
    specialize.enable_for_module(root, None)   # no original: the file's specializations, chosen per call

    def root_has_tensor(rel, kind):
        *mods, last = rel.split(".")
        m = _walk(root, ".".join(mods)) if mods else root
        store = None if m is None else (m._parameters if kind == "parameter" else m._buffers)
        return store is not None and store.get(last) is not None

    specializations.load_table(program, table, root, budget, root_has_tensor, lambda rel: {}, _check_weights)
    return root


def _check_call(node, callee, at: str) -> None:
    """A call_module node must pass what the callee takes and receive what it returns."""
    n_caps = sum(1 for v in callee.inputs if v.hint == "__capture__")
    if len(node.args) != len(callee.inputs) or node.attrs["n_captures"] != n_caps:
        raise LoadError(f"{at}: passes {len(node.args)} arguments ({node.attrs['n_captures']} captured) to a method "
                        f"that takes {len(callee.inputs)} arguments ({n_caps} captured)")
    for a, v in zip(node.args, callee.inputs):
        if not isinstance(a, Value) or hasattr(a.type, "shape") != hasattr(v.type, "shape"):
            raise LoadError(f"{at}: an argument does not match the callee's input kind")
    if len(node.outputs) != len(callee.outputs):
        raise LoadError(f"{at}: receives {len(node.outputs)} values from a method that returns {len(callee.outputs)}")


def _walk(module, rel: str):
    """The submodule at the dotted path ``rel`` below ``module``, or None."""
    for part in rel.split("."):
        module = module._modules.get(part)
        if module is None:
            return None
    return module


def _build_modules(by_path: dict, tensors: dict) -> dict:
    """``{path: TracedModule}`` (no methods yet): the file's module entries checked and read into a Program's
    ModuleEntry records (tracejit/program.py), built by the runtime (runtime/assemble.py)."""
    shared: dict = {}   # one nn.Parameter per stored tensor, so parameters shared at save time stay shared
    entries = []
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
        entries.append(ModuleEntry(path, type_name, bool(e.get("training", False)),
                                   tuple(params), tuple(buffers), frozenset(str(x) for x in nonp),
                                   tuple((n, child) for n, child in children)))
    made = assemble.module_tree(sorted(entries, key=lambda entry: entry.path != ""))   # the root first
    _check_acyclic(made[""])
    return made


def _check_acyclic(root) -> None:
    """Module trees may share modules but never contain themselves."""
    done: set[int] = set()

    def visit(m, path: str, stack: set[int]):
        if id(m) in stack:
            raise LoadError(f"the module hierarchy has a cycle: {path!r} is one of its own ancestors "
                            f"(a {m.original_name})")
        if id(m) in done:
            return
        stack.add(id(m))
        for name, child in m._modules.items():
            if child is not None:
                visit(child, f"{path}.{name}" if path else name, stack)
        stack.discard(id(m))
        done.add(id(m))

    visit(root, "", set())


def _check_weights(g, owner, where: str) -> None:
    """Parameters, buffers and constants must have the dtype and shape the graph was traced with."""
    for i, node in enumerate(g.nodes):
        if node.op == "tracejit::get_attr":
            *mods, last = node.attrs["path"].split(".")
            m = owner
            for part in mods:
                m = m._modules[part]
            t = (m._parameters if node.attrs["kind"] == "parameter" else m._buffers)[last]
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
