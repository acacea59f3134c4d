"""The generated code of each method of a loaded Program (tracejit/program.py), without compiling it.

``tracejit inspect --code`` prints this: codegen run on the Program's graphs, never the runtime's compiled
objects. It produces what ``tracejit.load`` would compile (runtime/assemble.compile_loaded with
serialize/compile_once.py): the same order (deepest modules first: a loaded program's call budget plan
learns while its methods are generated which ones check sizes, and a root method's code depends on it),
root methods with their input checks and guards, one generation per (graph, root?) and the ``def`` line
renamed for the other names sharing it. tests/cli/test_inspect_program.py checks it against ``load``'s ``.code``.
"""
from __future__ import annotations

from .names import safe_identifier
from .python import generate


def method_sources(program) -> dict:
    """``{(module path, method name): source}`` for every traced method of ``program`` (a Program
    decoded from a file: serialize.read_program); a function's one method is ``("", "forward")``."""
    if program.kind == "function":
        g = program.graph("forward")
        return {("", "forward"): generate(g, "forward", guards=True, budget=g.call_budget)[0]}
    out: dict = {}
    generated: dict = {}   # (id(graph), root?) -> (def name, source) of its first generation
    deepest_first = sorted(program.modules, key=lambda e: -len(e.path.split(".")) if e.path else 0)
    for entry in deepest_first:
        is_root = entry.path == ""
        for name, graph in entry.methods:
            key = (id(graph), is_root)
            if key not in generated:
                src = generate(graph, name, guards=is_root, budget=graph.call_budget)[0]
                generated[key] = (safe_identifier(name, limit=200), src)
                out[(entry.path, name)] = src
                continue
            first_def, src = generated[key]
            head = f"def {first_def}("
            own = f"def {safe_identifier(name, limit=200)}("
            out[(entry.path, name)] = own + src[len(head):] if src.startswith(head) else src
    return out
