"""A file holds every specialization: the ``specializations`` table of a schema-3 program.

``save`` writes, besides the module tree (whose methods are the first traces), one entry per
later specialization of a root method, oldest first::

    {"method": "forward", "graph": 7, "reason": "a traced size ... trace value 5, now 1",
     "source": ["model.py", 12, "forward"]}

``graph`` indexes the program's graph table (so a graph two specializations share is stored
once, and the tensors they read are the module's own parameters and buffers or constants the
table stores once by object). A specialization's graph has every submodule call inlined: it
names parameters and buffers by their path below the root and calls no method of another
specialization. ``load`` validates each graph with the same checks as a method's (the graph
table's node limit counts every specialization), compiles it with its guards, and publishes it
in the method's ``SpecializationSet``: calls then choose per call, as in memory. Files of
schema 1 and 2 have no table and load with their first traces only.
"""
from __future__ import annotations

from ..errors import LoadError
from ..ir import SourceLoc
from ..runtime import specialize
from . import limits, validate
from .budget_plan import BudgetPlan

MAX_SPECIALIZATIONS = 256   # entries of the table (a live object keeps at most specialize.LIMIT per method)


def encode_table(program, graphs) -> list:
    """The table for ``program`` (a Program: tracejit/program.py); ``graphs`` is the archive's graph table."""
    out = []
    count: dict = {}
    for spec in program.specializations:
        n = count[spec.method] = count.get(spec.method, 0) + 1
        src = spec.source
        out.append({"method": spec.method, "graph": graphs.add(spec.graph, "", f"{spec.method}/specialization{n}"),
                    "reason": spec.reason,
                    "source": [src.filename, src.lineno, src.function] if src is not None else None})
    return out


def load_table(program: dict, table, owner, budget: int, has_tensor, methods_of, check_weights) -> None:
    """Validate, compile and publish every specialization the file holds into ``owner``'s sets."""
    from ..runtime.traced import compile_method
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
    sets = specialize.sets_of(owner)
    for method, spec_set in sets.items():   # a file may hold more than a live object keeps: keep them all
        spec_set.limit = max(spec_set.limit, 1 + sum(1 for e in entries if isinstance(e, dict)
                                                     and e.get("method") == method))
    label = getattr(owner, "original_name", None) or owner.__name__
    for k, e in enumerate(entries):
        where = f"specialization {k}"
        if not isinstance(e, dict) or set(e) - {"method", "graph", "reason", "source"}:
            raise LoadError(f"{where}: malformed entry (expected method, graph, reason, source)")
        method = e.get("method")
        if not isinstance(method, str) or method not in sets:
            raise LoadError(f"{where}: names method {str(method)[:60]!r}, which the program does not trace "
                            f"(it traces {sorted(sets)})")
        where = f"{where} of {method!r}"
        reason = limits.text(e.get("reason"), f"{where} reason")
        source = _source(e.get("source"), where)
        g = table.get(e.get("graph"), where)
        if any(n.op == "tracejit::call_module" for n in g.nodes):
            raise LoadError(f"{where}: a specialization's graph must have its submodule calls inlined; it calls "
                            "a submodule method")
        validate.check_graph(g, where, has_tensor, methods_of, budget)
        check_weights(g, owner if has_tensor is not None else None, where)
        g.call_budget = BudgetPlan(budget)   # a file's program: call-time budget checks (support/call_budget.py)
        fn = compile_method(g, method, f"{label}.{method}#{k + 1}", guards=True,
                            display=None if has_tensor is not None else label)
        sets[method].add(specialize.Specialization(method, fn, reason, source))


def _source(src, where: str):
    if src is None:
        return None
    if not (isinstance(src, list) and len(src) == 3 and isinstance(src[0], str) and isinstance(src[1], int)
            and not isinstance(src[1], bool)):
        raise LoadError(f"{where}: malformed source (expected [file, line, function])")
    return SourceLoc(limits.text(src[0], f"{where} source"), src[1], limits.text(src[2], f"{where} source"))
