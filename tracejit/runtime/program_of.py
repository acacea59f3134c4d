"""A traced object's Program (tracejit/program.py): the runtime's compiled objects read back as plain data.

The runtime is the one place that knows where a TracedFunction or TracedModule keeps its compiled
methods and specializations; everything above it (save, the CLI, tools) asks for the Program instead.
"""
from __future__ import annotations

from ..program import ModuleEntry, Program, SpecializationEntry, of_function
from . import specialize


def function_program(obj) -> Program:
    """The Program of a TracedFunction (a snapshot: it does not follow later specializations)."""
    return of_function(obj.__name__, obj._fn.graph, obj.ledger).replace(specializations=_specializations(obj))


def module_program(obj, traced_module_class) -> Program:
    """The Program of a TracedModule (a snapshot). A TypeError for a tree holding a module that is not a
    ``traced_module_class``; the tree is walked with ``named_modules``: a module shared by two parents is
    one entry, at its first path."""
    first_path: dict[int, str] = {}
    found = []
    for path, m in obj.named_modules(remove_duplicate=False):
        if id(m) in first_path:
            continue
        if not isinstance(m, traced_module_class):
            raise TypeError(f"submodule {path!r} is a {type(m).__name__}, not a TracedModule")
        first_path[id(m)] = path
        found.append((path, m))
    entries = tuple(
        ModuleEntry(path, m.original_name, bool(m.training), tuple(m._parameters.items()), tuple(m._buffers.items()),
                    frozenset(m._non_persistent_buffers_set),
                    tuple((n, None if c is None else first_path[id(c)]) for n, c in m._modules.items()),
                    tuple((n, fn.graph) for n, fn in m._traced_methods.items()))
        for path, m in found)
    sets = specialize.sets_of(obj)
    entry_points = tuple(sets) if sets else tuple(obj._traced_methods)
    return Program("module", obj.original_name, entries, entry_points, _specializations(obj), tuple(obj.ledger))


def _specializations(obj) -> tuple:
    return tuple(SpecializationEntry(method, spec.graph, spec.reason, spec.source)
                 for method, spec_set in specialize.sets_of(obj).items() for spec in spec_set.extra())
