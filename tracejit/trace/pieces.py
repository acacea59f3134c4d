"""The number of pieces ``unbind`` / ``split`` return, guarded before the op where it follows a size.

A node with several results unpacks them into names (``a, b = x.unbind(0)``), so a call whose input has
another size along that dimension would fail inside the generated code with Python's "too many values to
unpack". Before such an op the recorder guards the count it relied on, written in sizes (the split size or the
chunk count may be a traced size too: ``torch.split(t, x.shape[0])`` of a constant ``t``):
``x.size(d) == n`` for ``unbind(d)``, ``ceil(x.size(d) / s) == n`` for ``split(s, d)`` with an int ``s``,
``ceil(x.size(d) / ceil(x.size(d) / c)) == n`` for ``chunk(c, d)`` (3 chunks of a size 2 are 2): a call with
another count raises GuardError naming the source line (or retraces), one with the same count runs. The
other splitting ops return a count fixed by their constant arguments (sections, a list of sizes or indices;
eager raises where the size does not fit them).
"""
from __future__ import annotations

import torch

from .reads import sizes_of
from .source import user_location
from .symbolic import TracedInt

# op name -> (position of ``dim`` in the arguments, its default); the split size is argument 1
_DIM = {"unbind": (1, 0), "split": (2, 0), "chunk": (2, 0)}


def guard_count(tracer, name: str, args, kwargs) -> None:
    """Guard the number of pieces ``name(*args, **kwargs)`` will return, where it follows a traced size."""
    where = _DIM.get(name)
    if where is None or not args or not isinstance(args[0], torch.Tensor):
        return
    x = args[0]
    pos, default = where
    dim = args[pos] if len(args) > pos else kwargs.get("dim", default)
    if not isinstance(dim, int) or isinstance(dim, TracedInt) or not -x.dim() <= dim < max(x.dim(), 1):
        return   # eager raises, or a dimension the trace computed (its own guards hold it)
    v = tracer.value_of(x)
    size = sizes_of(tracer, x, dim % x.dim()) if v is not None and v.dynamic else x.shape[dim]
    if name == "unbind":
        if not isinstance(size, TracedInt):
            return
        count = size
    else:
        keys = ("chunks",) if name == "chunk" else ("split_size", "split_size_or_sections")
        step = args[1] if len(args) > 1 else next((kwargs[k] for k in keys if k in kwargs), None)
        if not isinstance(step, int) or isinstance(step, bool) or int.__int__(step) <= 0:
            return   # a list of sizes: the count is its length
        if not isinstance(size, TracedInt) and not isinstance(step, TracedInt):
            return   # a count fixed by constants
        if name == "chunk":
            step = (size + (step - 1)) // step   # the size of each chunk but the last
        count = (size + (step - 1)) // step
    n, loc = int.__int__(count), user_location(3)
    what = f"the number of pieces {name}() returns ({n}), unpacked by the program"
    tracer.ledger.add("size", what, loc, n, warn=False)   # the entry the guard belongs to (the op's own warns)
    tracer.guards.size(count, what, n, loc, method="__eq__", other=n, outcome=True)
