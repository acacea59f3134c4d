"""A Program (tracejit/program.py) compiled into the objects users call: the module tree mirrored as
TracedModules holding the program's very tensors, each method compiled (entry points with their guards)
and installed. Tracing, migrate and the loader build their objects here."""
from __future__ import annotations

from ..program import Program
from . import specialize
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


def compile_loaded(program: Program, method_compiler):
    """The object a loaded ``program`` (decoded and validated: serialize/program_decoder.py) runs: its tree
    with its tensors, each (module, method) compiled by ``method_compiler(graph, name, is_root)`` (the
    loader's compiles each stored graph once: serialize/compile_once.py; ``method_compiler.entry_point`` compiles
    a function's method and each specialization), and every specialization the file
    holds, chosen per call. There is no original to retrace: a call no specialization fits raises GuardError."""
    if program.kind == "function":
        out = TracedFunction(program.name, program.graph("forward"), program.ledger,
                             compile=method_compiler.entry_point)
        specialize.enable_for_function(out, None)
    else:
        made = module_tree(program.modules)
        # deepest modules first: a root method's code checks its inputs' sizes when any method it runs
        # checks sizes (the call budget plan learns that while they compile: codegen/budget_emit.py)
        deepest_first = sorted(program.modules, key=lambda e: -len(e.path.split(".")) if e.path else 0)
        install(made, {e.path: {name: method_compiler(g, name, e.path == "") for name, g in e.methods}
                       for e in deepest_first})
        out = made[""]
        out.ledger = tuple(program.ledger)
        specialize.enable_for_module(out, None)
    sets = specialize.sets_of(out)
    for method, spec_set in sets.items():   # a file may hold more than a live object keeps: keep them all
        spec_set.limit = max(spec_set.limit, 1 + sum(1 for s in program.specializations if s.method == method))
    label = getattr(out, "original_name", None) or out.__name__
    for k, s in enumerate(program.specializations):
        fn = method_compiler.entry_point(s.graph, s.method, f"{label}.{s.method}#{k + 1}",
                                         display=label if program.kind == "function" else None)
        sets[s.method].add(specialize.Specialization(s.method, fn, s.reason, s.source))
    return out


def module_tree(entries) -> dict:
    """``{path: TracedModule}``: the modules ``entries`` (a Program's ModuleEntry records) describe, with their
    tensors, flags and children (a module two parents share is one object), without methods (``install``)."""
    made: dict[str, TracedModule] = {}
    for e in entries:
        tm = TracedModule(e.type_name)
        tm.__dict__["training"] = e.training   # a plain flag: past nn.Module.__setattr__ (as nn.Module.__init__ sets it)
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
