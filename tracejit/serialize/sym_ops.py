"""Loader validation for ``tracejit::sym_math`` (float math on traced sizes): a known function
from a fixed table, its number of operands, each a recorded int / float or a number."""
from __future__ import annotations

from ..errors import LoadError
from ..ir import Value
from ..ops.names import SYM_FNS, SYM_MATH

OPS = {SYM_MATH}


def check_node(node, at: str) -> None:
    fn = node.attrs.get("fn")
    if fn not in SYM_FNS:
        raise LoadError(f"{at}: sym_math function {str(fn)[:40]!r} is not one of {', '.join(SYM_FNS)}")
    if node.kwargs or len(node.args) != SYM_FNS[fn][0]:
        raise LoadError(f"{at}: {fn} takes {SYM_FNS[fn][0]} operand(s), got {len(node.args)}")
    for a in node.args:
        ok = (isinstance(a, Value) and getattr(a.type, "kind", None) in ("int", "float")) or (
            isinstance(a, (int, float)) and not isinstance(a, bool))
        if not ok:
            raise LoadError(f"{at}: {fn} takes traced sizes or numbers, got {type(a).__name__}")
    if len(node.outputs) != 1 or node.outputs[0] is None or getattr(node.outputs[0].type, "kind", None) not in (
            "int", "float"):
        raise LoadError(f"{at}: {fn} defines one int or float")
