"""Codegen for ``tracejit::sym_math``: float math on traced sizes (trace/symfloat.py).

    tracejit::sym_math(h)[fn=ceil]      _tj_sym.ceil(h)      (math.ceil; floor, trunc, round alike)
    tracejit::sym_math(a, b)[fn=max]    _tj_sym.max(a, b)    (builtins max; min alike)

The functions come from a fixed table, never from the file.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

from ..ops.names import SYM_FNS, SYM_MATH

OPS = {SYM_MATH}
FUNCTIONS = SimpleNamespace(ceil=math.ceil, floor=math.floor, trunc=math.trunc, round=round, max=max, min=min)
assert set(vars(FUNCTIONS)) == set(SYM_FNS)


def node_expr(gen, node) -> str:
    gen.globals["_tj_sym"] = FUNCTIONS
    return f"_tj_sym.{node.attrs['fn']}({', '.join(gen.expr(a) for a in node.args)})"
