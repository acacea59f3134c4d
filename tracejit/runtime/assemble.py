"""A Program (tracejit/program.py) compiled into the objects users call: the module tree mirrored as
TracedModules holding the program's very tensors, each method compiled (entry points with their guards)
and installed. Tracing, migrate and the loader build their objects here."""
from __future__ import annotations

from ..program import Program
from .traced import TracedFunction, TracedModule, compile_methods


def compile_program(program: Program):
    """A TracedFunction or TracedModule running ``program``'s first traces (the caller enables the
    specializations: runtime/specialize.py). A Program holding later specializations is refused here:
    the loader compiles and publishes those itself (serialize/specializations.py)."""
    if program.specializations:
        raise ValueError(f"compile_program compiles first traces only; this program holds "
                         f"{len(program.specializations)} later specializations")
    if program.kind == "function":
        return TracedFunction(program.name, program.graph("forward"), program.ledger)
    methods = {e.path: dict(e.methods) for e in program.modules if e.methods}
    root_methods = {name: program.graph(name) for name in program.entry_points}
    made = module_tree(program.modules)
    install(made, compile_methods(methods, root_methods, program.name))
    made[""].ledger = tuple(program.ledger)
    return made[""]


def module_tree(entries) -> dict:
    """``{path: TracedModule}``: the modules ``entries`` (a Program's ModuleEntry records) describe, with their
    tensors, flags and children (a module two parents share is one object), without methods (``install``)."""
    made: dict[str, TracedModule] = {}
    for e in entries:
        tm = TracedModule(e.type_name)
        tm.training = e.training
        tm._parameters.update(e.parameters)
        tm._buffers.update(e.buffers)
        tm._non_persistent_buffers_set = set(e.non_persistent)
        made[e.path] = tm
    for e in entries:
        for name, child in e.children:
            made[e.path]._modules[name] = None if child is None else made[child]
    return made


def install(made: dict, compiled: dict) -> None:
    """Install ``compiled`` (``{path: {method: fn}}``) into the modules ``made`` (``{path: TracedModule}``);
    the root keeps the set for its training flag (a retrace for the other flag adds its own)."""
    for path, fns in compiled.items():
        if path in made:
            for name, fn in fns.items():
                made[path]._install(name, fn)
    root = made[""]
    root._traced_variants[root.training] = compiled
