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
table's node limit counts every specialization: program_decoder.py, into the Program's
``specializations``); runtime/assemble.compile_loaded compiles each with its guards and publishes it
in the method's ``SpecializationSet``: calls then choose per call, as in memory. Files of
schema 1 and 2 have no table and load with their first traces only.
"""
from __future__ import annotations

from ..support.global_guards import stale_global


def _traced_for_other_globals(graph) -> bool:
    """Does ``graph`` hold a ``global`` guard (trace/global_reads.py) that fails with the globals' values now?"""
    checks = getattr(graph, "memory_checks", None)   # module-level tensors, by identity (trace/global_tensors.py)
    return any(n.op == "tracejit::guard" and n.attrs.get("kind") == "global" and stale_global(n.attrs) is not None
               for n in graph.nodes) or (checks is not None and checks.changed())


def encode_table(program, graphs) -> list:
    """The table for ``program`` (a Program: tracejit/program.py); ``graphs`` is the archive's graph table."""
    out = []
    count: dict = {}
    for spec in program.specializations:
        if _traced_for_other_globals(spec.graph):
            continue   # the file holds the globals' values at saving (encode.py): this one is never chosen
        n = count[spec.method] = count.get(spec.method, 0) + 1
        src = spec.source
        out.append({"method": spec.method, "graph": graphs.add(spec.graph, "", f"{spec.method}/specialization{n}"),
                    "reason": spec.reason,
                    "source": [src.filename, src.lineno, src.function] if src is not None else None})
    return out
