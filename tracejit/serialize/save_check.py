"""``save`` refuses what ``load`` would refuse: each graph of the file's table is decoded and validated with the
loader's own checks (validate.check_graph: the op allow-list, the schema check, the family checks, the size
budget of a file of this size) before the file is written, and a refusal is a ``SaveError`` carrying the
``LoadError``'s message. The user learns it on the machine that saves, not on the server that loads.

What is not repeated: the checks of the file's structure around the graphs (module entries, weights, links,
limits), which save itself writes; a graph's references to parameters and submodule methods are taken as
written (the loader checks them against the module tree it builds from the same document).
"""
from __future__ import annotations

from ..errors import LoadError, SaveError
from . import limits, validate
from .program_decoder import _decode_graph


class _Anything:
    """The module tree as save wrote it: every reference a graph makes is there."""

    def __contains__(self, name) -> bool:
        return True


def check_loadable(program: dict, tensors: dict, file_size: int) -> None:
    """Raise SaveError when tracejit.load would refuse a graph of ``program`` (the file's program document)."""
    budget = limits.max_elements(file_size)
    ops: dict = {}   # what each op name passed, checked once for the whole file (validate._op_name)
    for idx, d in enumerate(program.get("graphs", ())):
        where = f"graph {idx} ({d.get('name', '?')})"
        try:
            g = _decode_graph(d, where, tensors)
            validate.check_graph(g, where, lambda path, kind: True, lambda path: _Anything(), budget, ops)
        except LoadError as e:
            raise SaveError(f"tracejit.load would refuse this program, so it is not saved: {e}") from None
