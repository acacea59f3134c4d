"""Print tracejit's import graph: cycles, upward edges, function-level imports, long files.

Stdlib only (ast), so it runs without importing the package. Usage::

    python scripts/import_graph.py [--json]

* **cycles**: strongly connected components (more than one module) of the graph of module-level imports
  (imports run when a module is imported: at top level, in ``if`` / ``try`` blocks and class bodies, not in
  functions). ``from .pkg import name`` is an edge to ``pkg/__init__`` unless ``name`` is a submodule.
  The same is printed counting function-level imports and declared lazy imports too: what those imports hide.
* **upward edges**: module-level imports from a lower layer to a higher one, by ``LAYERS`` below (the order
  written in docs/DESIGN.md, "Layers").
* **function-level imports**: import statements inside a function body, with the optional dependencies
  (``OPTIONAL``) counted apart; ``uncommented_function_imports`` lists those without a comment (on the
  statement's lines or the line above) saying why the import waits.
* **declared lazy imports**: ``LazyModule(".name", __package__)`` (tracejit/lazy_module.py) and the entries of the
  tables of modules imported by name (``DECLARED_TABLES``); counted as edges with the function-level imports.
* **long files**: files over ``MAX_LINES`` lines.

Before issue #24's refactor (main at 0733351, 2026-11-26), 167 modules:

* module-level import cycles: 3 (tracejit + porting + serialize{,.archive,.loader}: 5 modules; runtime.{specialize,
  traced,undo}: 3; serialize.{encode,guards,validate}: 3);
* counting function-level imports too: 6 cycles, the largest 28 modules (runtime, serialize, viewer, porting,
  export's backends, inference, migrate, api, patch), then trace/ (5), cli.hf <-> cli.trace, export.lowering <->
  export.unlisted_ops, ir.graph <-> ir.printer, trace.boundary <-> trace.guards;
* upward edges: 10 (17 counting function-level imports);
* function-level imports: 177, 14 of them optional dependencies;
* files over 400 lines: 1 (tracejit/api.py, 434).

After issue #24 item 5 (branch imports6, main at 64d7ce4 before it: 227 modules, 0 cycles, 6 cycles counting
function-level imports, 0 upward edges (5 counting them), 144 function-level imports, 15 of optional
dependencies): 228 modules, 0 cycles and 0 upward edges even counting function-level imports, 16 function-level
imports (13 of optional dependencies, 3 reviewed deferrals: tests/arch/test_import_graph.py DEFERRED_IMPORTS),
each with a comment. Session 8 (main at 84a026b): the 3 deferrals became declared ``LazyModule`` edges, and the
tables of modules imported by name are read as edges too; 13 function-level imports, all of optional dependencies.
The numbers of each round are in docs/DESIGN.md, "Layers".
"""
import argparse
import ast
import json
import sys
from pathlib import Path

PACKAGE = "tracejit"
MAX_LINES = 400
OPTIONAL = ("onnx", "onnxruntime", "openvino", "transformers", "numexpr", "triton", "onnxscript", "onnx_ir", "netron",
            "tqdm", "isal")

# Bottom to top: a module may import (at module level) only from its own layer or below.  The first matching
# prefix names a module's layer; docs/DESIGN.md "Layers" explains each.
LAYERS = [
    ("base", ["tracejit.version", "tracejit.errors", "tracejit.compat", "tracejit.escape", "tracejit.pytree",
              "tracejit.gc_pause", "tracejit.records", "tracejit.patterns", "tracejit.lazy_module"]),
    ("ir", ["tracejit.ir"]),
    ("ops", ["tracejit.ops"]),
    ("support", ["tracejit.support"]),
    ("trace", ["tracejit.trace"]),
    ("codegen", ["tracejit.codegen"]),
    ("kernels", ["tracejit.kernels"]),
    ("passes", ["tracejit.passes"]),
    ("program", ["tracejit.program"]),
    ("runtime", ["tracejit.runtime"]),
    ("serialize", ["tracejit.serialize"]),
    ("export", ["tracejit.export"]),
    ("backends", ["tracejit.backends", "tracejit.inference", "tracejit.auto_backend", "tracejit.auto_exactness"]),
    ("tools", ["tracejit.viewer", "tracejit.migrate", "tracejit.porting", "tracejit.hf_inputs",
               "tracejit.user_methods"]),
    ("api", ["tracejit.api", "tracejit.hf", "tracejit.patch", "tracejit.cli", "tracejit.__init__", "tracejit.__main__",
             "tracejit.lazy_names", "tracejit"]),
]


def module_name(root, path):
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts)


def layer_of(module):
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                return index
    return None


def resolve(importer, is_package, level, target):
    """The absolute name of an import's target, or None when it is outside the package."""
    if level == 0:
        return target if target and (target == PACKAGE or target.startswith(PACKAGE + ".")) else None
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


# Module-level tables that name the modules a function imports by name (declared dynamic imports): lazy_names.LAZY
# (the package's names imported on first use; relative to the package), cli/verbs.py's VERBS, and
# backends/protocol.py's BACKENDS. Their entries, and every ``LazyModule(".name", __package__)``, are edges of the
# graph that wait for first use, counted with the function-level imports (cycles, upward edges).
DECLARED_TABLES = ("LAZY", "VERBS", "BACKENDS")


def _strings(node):
    """The string constants of a table entry: the value itself, or the items of a tuple."""
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


class ImportVisitor(ast.NodeVisitor):
    """Collects (target, in_function, line) for every import statement of one file."""

    def __init__(self, module, is_package, modules):
        self.module, self.is_package, self.modules = module, is_package, modules
        self.depth = 0
        self.found = []
        self.lazy = []   # (target, line, how): a LazyModule or an entry of a declared table

    def _function(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _add(self, target, node, external):
        self.found.append((target, self.depth > 0, node.lineno, external, node.end_lineno or node.lineno))

    def visit_Import(self, node):
        for alias in node.names:
            target = resolve(self.module, self.is_package, 0, alias.name)
            self._add(self._existing(target) if target else None, node, alias.name.split(".")[0])

    def visit_ImportFrom(self, node):
        base = resolve(self.module, self.is_package, node.level, node.module)
        external = None if base else (node.module or "").split(".")[0]
        if base is None:
            self._add(None, node, external)
            return
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            self._add(sub if sub in self.modules else self._existing(base), node, None)

    def visit_Call(self, node):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name == "LazyModule" and node.args and _strings(node.args[0]):
            text = _strings(node.args[0])[0]
            level = len(text) - len(text.lstrip("."))
            target = resolve(self.module, self.is_package, level, text.lstrip(".") or None)
            if target in self.modules:
                self.lazy.append((target, node.lineno, "LazyModule"))
        self.generic_visit(node)

    def _table(self, node, targets):
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if self.depth == 0 and isinstance(node.value, ast.Dict) and set(names) & set(DECLARED_TABLES):
            for value in node.value.values:
                for text in _strings(value):
                    target = PACKAGE + text if text.startswith(".") else text   # lazy_names: relative to the package
                    if target in self.modules and (target, node.lineno, names[0]) not in self.lazy:
                        self.lazy.append((target, node.lineno, names[0]))
        self.generic_visit(node)

    def visit_Assign(self, node):
        self._table(node, node.targets)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self._table(node, [node.target])
        else:
            self.generic_visit(node)

    def _existing(self, name):
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name or None


def scan(root):
    files = {module_name(root, p).removesuffix(".__init__"): p for p in sorted(root.rglob("*.py"))}
    edges, function_imports, long_files, uncommented = {m: set() for m in files}, [], [], []
    lazy_imports = []
    all_edges = {m: set() for m in files}
    for module, path in files.items():
        text = path.read_text()
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if lines > MAX_LINES:
            long_files.append((str(path.relative_to(root.parent)), lines))
        visitor = ImportVisitor(module, path.name == "__init__.py", files)
        visitor.visit(ast.parse(text, str(path)))
        source_lines = text.splitlines()
        for target, in_function, line, external, end in visitor.found:
            if in_function:
                function_imports.append((module, line, target or external))
                if not _commented(source_lines, line, end):
                    uncommented.append(f"{module}:{line} -> {target or external}")
            elif target and target != module:
                edges[module].add(target)
            if target and target != module:
                all_edges[module].add(target)
        for target, line, how in visitor.lazy:
            lazy_imports.append((module, line, target, how))
            if target != module:
                all_edges[module].add(target)
    return files, edges, all_edges, function_imports, long_files, uncommented, lazy_imports


def _commented(lines, first: int, last: int) -> bool:
    """Does the statement on lines ``first``..``last`` (1-based) carry a comment, or the line above it?"""
    above = lines[first - 2].strip() if first >= 2 else ""
    return above.startswith("#") or any("#" in lines[i - 1] for i in range(first, last + 1))


def strongly_connected(edges):
    """Tarjan's algorithm, iterative; returns the components with more than one module, largest first."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]; counter[0] += 1
        stack.append(start); on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]; counter[0] += 1
                    stack.append(child); on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop(); on_stack.discard(member); component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return sorted(result, key=lambda c: (-len(c), c))


def imported_with(edges, module: str) -> set:
    """The tracejit modules ``import module`` runs: its module-level imports, theirs, and so on, with the
    packages above each (Python imports a module's parents first)."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        parents = [".".join(name.split(".")[:k]) for k in range(1, name.count(".") + 1)]
        for m in [name, *parents]:
            if m in edges and m not in seen:
                seen.add(m)
                todo.extend(edges[m])
    return seen


def upward_edges(edges):
    found = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            low, high = layer_of(module), layer_of(target)
            if low is not None and high is not None and high > low:
                found.append((module, target))
    return found


def report(root):
    files, edges, all_edges, function_imports, long_files, uncommented, lazy_imports = scan(root)
    optional = [f for f in function_imports if str(f[2]).split(".")[0] in OPTIONAL]
    return {"modules": len(files), "cycles": strongly_connected(edges), "upward_edges": upward_edges(edges),
            "cycles_with_function_imports": strongly_connected(all_edges),
            "upward_edges_with_function_imports": len(upward_edges(all_edges)),
            "hidden_upward_edges": sorted(set(upward_edges(all_edges)) - set(upward_edges(edges))),
            "function_imports": len(function_imports), "function_imports_optional": len(optional),
            "function_import_sites": [f"{m}:{line} -> {t}" for m, line, t in function_imports],
            "uncommented_function_imports": uncommented,
            "lazy_import_sites": [f"{m}:{line} -> {t} ({how})" for m, line, t, how in lazy_imports],
            "long_files": long_files}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent / PACKAGE))
    args = parser.parse_args(argv)
    result = report(Path(args.root))
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        return 0
    print(f"modules: {result['modules']}")
    print(f"cycles: {len(result['cycles'])}")
    for component in result["cycles"]:
        print(f"  {len(component)} modules: {' '.join(component)}")
    hidden = result["cycles_with_function_imports"]
    print(f"cycles counting function-level and declared lazy imports too: {len(hidden)} (sizes {[len(c) for c in hidden]})")
    print(f"upward edges: {len(result['upward_edges'])} (counting function-level and declared lazy imports too: "
          f"{result['upward_edges_with_function_imports']})")
    for low, high in result["upward_edges"]:
        print(f"  {low} -> {high}")
    print(f"function-level imports: {result['function_imports']} ({result['function_imports_optional']} of "
          f"optional dependencies; {len(result['uncommented_function_imports'])} without a comment)")
    for site in result["function_import_sites"]:
        print(f"  {site}")
    print(f"declared lazy imports (LazyModule and the tables {', '.join(DECLARED_TABLES)}): "
          f"{len(result['lazy_import_sites'])}")
    for site in result["lazy_import_sites"]:
        print(f"  {site}")
    print(f"files over {MAX_LINES} lines: {len(result['long_files'])}")
    for path, lines in result["long_files"]:
        print(f"  {path}: {lines}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
