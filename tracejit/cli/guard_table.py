"""The guards of a Program's graphs as rows, for ``tracejit inspect`` (read from the graphs: nothing compiled)."""
from __future__ import annotations

from ..ir import GUARD, guard_expr
from ..ir.printer import Namer, format_arg


def guard_rows(methods) -> list:
    """``[[method, kind, source, predicate, expected]]`` for every guard; ``methods``: ``(path, module type, method,
    Graph)`` as cli/common.methods_of gives."""
    rows = []
    for path, _, mname, graph in methods:
        namer = Namer(graph)
        for node in graph.nodes:
            for v in node.outputs:
                if v is not None and id(v) not in namer.names:
                    namer.define(v)
            if node.op != GUARD:
                continue
            a = node.attrs
            pred = guard_expr(a["test"], [format_arg(x, namer) for x in node.args], a.get("call"),
                              [f"{k}={format_arg(x, namer)}" for k, x in node.kwargs.items()])
            src = f"{node.source.filename.rsplit('/', 1)[-1]}:{node.source.lineno}" if node.source else "-"
            rows.append([f"{path}.{mname}" if path else mname, a["kind"], src, pred, repr(a["expected"])[:40]])
    return rows
