"""Compare the registry's derived op facts with the hand-written tables they replaced, over the ops the
tests/models corpus actually records (issue #24 item 2). Prints, per fact, the corpus ops where the two
answers differ; an empty line means the registry answers as the old table did on every op met.

    PYTHONPATH=. python scripts/op_facts_corpus.py            # all corpus models (a few minutes)
    PYTHONPATH=. python scripts/op_facts_corpus.py bert resnet
"""
from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

from models import model_corpus  # noqa: E402
from ops import test_derived_tables as old  # noqa: E402

from tracejit import ops  # noqa: E402


def corpus_ops(names) -> set[str]:
    """Every ATen op (qualified) recorded by the corpus models, callee graphs included."""
    found: set[str] = set()
    for name in names:
        traced = model_corpus.traced_case(name).traced
        graphs = [traced.graph] + [m.graph for _, m in getattr(traced, "named_modules", lambda: [])()
                                   if hasattr(m, "graph")]
        for g in graphs:
            stack = [g]
            while stack:
                graph = stack.pop()
                stack.extend(getattr(graph, "callees", {}).values())
                found.update(n.op for n in graph.nodes if n.op.startswith("aten::"))
    return found


FACTS = [   # (name, old answer for a bare name, registry answer for a qualified op)
    ("in-place twin (UNARY | SCALAR_BINARY)", lambda n: n in old.OLD_UNARY | old.OLD_SCALAR_BINARY,
     lambda op: ops.inplace_twin(op) is not None),
    ("fresh (FRESH)", lambda n: n in old.OLD_FRESH, ops.is_fresh),
    ("pieces (_PIECES)", lambda n: n in old.OLD_PIECES, lambda op: ops.pieces_follow_size(ops.base_name(op))),
    ("layout-free (LAYOUT_FREE)", lambda n: n in old.OLD_LAYOUT_FREE, ops.is_layout_free),
    ("promoting (PROMOTING | COMPARING)", lambda n: n.rstrip("_") in old.OLD_PROMOTING | old.OLD_COMPARING,
     lambda op: ops.is_pointwise(ops.base_name(op).rstrip("_"))),
    ("accumulating (ACCUMULATING)", lambda n: n.rstrip("_") in old.OLD_ACCUMULATING,
     lambda op: ops.accumulates(ops.base_name(op).rstrip("_"))),
    ("view (VIEW_OPS)", lambda n: n in old.OLD_VIEW_OPS, lambda op: ops.shares_memory(ops.base_name(op))),
    ("outgrows (GROWING)", lambda n: n in old.OLD_GROWING, ops.outgrows_inputs),
]


def main(argv) -> None:
    names = argv or list(model_corpus.SPECS)
    seen = sorted(corpus_ops(names))
    print(f"{len(seen)} distinct ATen ops recorded by {', '.join(names)}")
    for fact, was, now in FACTS:
        gained = sorted(op for op in seen if now(op) and not was(ops.base_name(op)))
        lost = sorted(op for op in seen if was(ops.base_name(op)) and not now(op))
        print(f"{fact}: {sum(now(op) for op in seen)} now; gained {gained or '-'}; lost {lost or '-'}")


if __name__ == "__main__":
    main(sys.argv[1:])
