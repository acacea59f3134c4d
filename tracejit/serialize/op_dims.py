"""Constant dimension arguments within the ranks of the node's tensors, checked at load (hostile-file round 21).

A file's ``dim`` (and ``dims``, ``dim0``, ``dimension``, ... : schema_check.DIM_NAMES) of an op on a tensor
``self`` only had to lie within [-64, 64): ``gather`` / ``sort`` / ``transpose`` / ``topk`` / ``narrow`` /
``unfold`` ... with ``dim=5`` on a 2-D input loaded and raised a raw IndexError at the first call. Here each
constant one must lie within [-r, r), ``r`` the larger of ``self``'s traced rank and the node's outputs' (an
op such as ``unsqueeze`` or ``diag_embed`` names a dimension of its output; a 0-d tensor counts as rank 1,
as ATen wraps it). An op without a tensor ``self`` (``cat``, ``stack``: a list) is not checked here. A list of
dimensions may not name one twice (``sum(dim=[1, 1])``: the kernel's RuntimeError at the first call), except for
the ops the registry says accept it (ops.aten.accepts_repeated_dims); ``tile``'s ``dims`` are repetitions, not
dimensions (schema_check.NOT_DIMS).
"""
from __future__ import annotations

from ..errors import LoadError
from ..ir import Value
from ..ops.aten import accepts_repeated_dims
from .schema_check import is_dim_arg


def _rank(v):
    shape = getattr(getattr(v, "type", None), "shape", None) if isinstance(v, Value) else None
    return None if shape is None else len(shape)


def check_dims(name: str, bound: dict, node, at: str) -> None:
    """LoadError naming the argument when a constant dimension is outside every tensor of the node."""
    rank = _rank(bound.get("self"))
    if rank is None:
        return
    for out in node.outputs:
        r = _rank(out)
        if r is not None:
            rank = max(rank, r)
    rank = max(rank, 1)
    for arg, v in bound.items():
        if not is_dim_arg(name, arg):
            continue
        dims = v if isinstance(v, (list, tuple)) else (v,)
        for d in dims:
            if isinstance(d, int) and not isinstance(d, bool) and not -rank <= d < rank:
                raise LoadError(f"{at}: aten::{name}: {arg} {d} is out of range for tensors of at most {rank} "
                                f"dimensions (expected {-rank} to {rank - 1})")
        plain = [d % rank for d in dims if isinstance(d, int) and not isinstance(d, bool)]
        if isinstance(v, (list, tuple)) and len(set(plain)) < len(plain) and not accepts_repeated_dims(name):
            raise LoadError(f"{at}: aten::{name}: {arg} {list(v)} names a dimension twice (its kernel refuses that)")
