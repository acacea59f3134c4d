"""Only the runtime (and the api layer that builds its objects) touches the runtime's internals (issue #24
item 1): serialize, export, backends, the viewer, migrate and the CLI read a traced object's Program
(``traced.program`` / ``program_of``), never its compiled methods. An AST scan of tracejit/."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tracejit"
# The runtime's internals are named _traced*: TracedModule._traced_methods (the compiled methods),
# _traced_variants (the root's per-training-flag sets), _traced_retrace.
ALLOWED = ("runtime/", "api.py")   # the runtime itself; api.py builds the objects (retrace) in the top layer


def _is_internal(name) -> bool:
    return isinstance(name, str) and name.startswith("_traced")


def internal_uses(source: str) -> list:
    """``[(line, name)]``: attribute reads / writes of a runtime internal, and getattr / hasattr / setattr
    / ``__dict__[...]`` with its name as a string."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _is_internal(node.attr):
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Constant) and _is_internal(node.args[1].value):
            found.append((node.lineno, node.args[1].value))
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and _is_internal(node.slice.value):
            found.append((node.lineno, node.slice.value))
    return found


def test_no_module_outside_the_runtime_touches_its_internals():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(ALLOWED):
            continue
        bad += [f"tracejit/{rel}:{line}: {name}" for line, name in internal_uses(path.read_text())]
    assert not bad, ("these modules read the runtime's internals; read the traced object's Program "
                     "(traced.program, runtime.traced.program_of) or ask the runtime (runtime/assemble.py):\n"
                     + "\n".join(bad))


def test_the_scan_sees_each_way_of_reaching_an_internal():
    source = ("a = m._traced_methods['forward']\n"
              "b = getattr(m, '_traced_methods', {})\n"
              "root._traced_variants[True] = {}\n"
              "c = m.__dict__['_traced_retrace']\n"
              "k._variants = {}\n"                     # another object's own attribute: fine
              "d = m.method_graphs\n"                  # public: fine
              "def _traced(x): return x\n")           # a function's own name: not an attribute
    assert sorted(internal_uses(source)) == [(1, "_traced_methods"), (2, "_traced_methods"), (3, "_traced_variants"),
                                            (4, "_traced_retrace")]
