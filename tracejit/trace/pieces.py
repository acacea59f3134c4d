"""The number of pieces ``unbind`` / ``split`` return, guarded before the op where it follows a size.

A node with several results unpacks them into names (``a, b = x.unbind(0)``), so a call whose input has
another size along that dimension would fail inside the generated code with Python's "too many values to
unpack". Before such an op the recorder guards the count it relied on, written in sizes:
``x.size(d) == n`` for ``unbind(d)``, ``(x.size(d) + s - 1) // s == n`` for ``split(s, d)`` with an int
``s``: a call with another count raises GuardError naming the source line (or retraces), one with the
same count runs. The other splitting ops return a count fixed by their constant arguments (sections, a list
of sizes or indices; eager raises where the size does not fit them).
"""
from __future__ import annotations

import torch

from .reads import sizes_of
from .source import user_location
from .symbolic import TracedInt

# op name -> (position of ``dim`` in the arguments, its default); the split size is argument 1
_DIM = {"unbind": (1, 0), "split": (2, 0)}


def guard_count(tracer, name: str, args, kwargs) -> None:
    """Guard the number of pieces ``name(*args, **kwargs)`` will return, where it follows a traced size."""
    where = _DIM.get(name)
    if where is None or not args or not isinstance(args[0], torch.Tensor) or not tracer.value_of(args[0]).dynamic:
        return
    x = args[0]
    pos, default = where
    dim = args[pos] if len(args) > pos else kwargs.get("dim", default)
    if not isinstance(dim, int) or isinstance(dim, TracedInt) or not -x.dim() <= dim < max(x.dim(), 1):
        return   # eager raises, or a dimension the trace computed (its own guards hold it)
    size = sizes_of(tracer, x, dim % x.dim())
    if not isinstance(size, TracedInt):
        return
    if name == "unbind":
        count = size
    else:
        step = args[1] if len(args) > 1 else kwargs.get("split_size", kwargs.get("split_size_or_sections"))
        if not isinstance(step, int) or isinstance(step, (bool, TracedInt)) or step <= 0:
            return   # a list of sizes: the count is its length
        count = (size + (step - 1)) // step
    n = int.__int__(count)
    tracer.guards.size(count, f"the number of pieces {name}() returns ({n}), unpacked by the program", n,
                       user_location(3), method="__eq__", other=n, outcome=True)
