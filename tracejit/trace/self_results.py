"""An op that returned its own input at trace time returns a view of it instead.

Some ops return their input itself for some inputs and a new tensor for others:
``x.contiguous()`` (x itself when it is contiguous, a copy when not), ``x.float()`` /
``x.to(...)`` (itself when nothing changes), ``torch.as_tensor``, ``resolve_conj``,
``torch.broadcast_tensors``, ... The recorder knows a tensor by its identity, so a result
that *is* its input would rebind that tensor to the op's output: every later use of x
would read the op's result. Without in-place writes the two hold the same values either
way, but after ``x.contiguous().add_(1)`` the trace read the written value for ``x``,
which is wrong for every call where ``contiguous()`` copies (the second answer of
``f(x) = (x.contiguous().add_(1), x * 1)`` on a transposed x).

So such a result is handed back to the program as a view of its input (``view_as``): it
shares the input's memory, as the result did, but it is another tensor, so the graph keeps
the input and the op's output apart. At call time the recorded op runs for real, and a
write through its result reaches the input exactly when the op aliased for that input,
as in eager mode. Nothing is added to the graph: no guard, no cost at call time.

In-place ops (``add_``, ``__iadd__``) and ``out=`` calls return their input on every
input and are left alone. A result the view cannot be made for (sparse, nested, mkldnn,
a tensor subclass refusing views) is returned as it is.
"""
from __future__ import annotations

import torch


def _inplace(name: str) -> bool:
    if name.startswith("__i") and name.endswith("__"):
        return True
    return name.endswith("_") and not name.endswith("__")


def _tensor_args(args) -> list:
    found = []
    for a in args:
        if isinstance(a, torch.Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(x for x in a if isinstance(x, torch.Tensor))
    return found


def _view_of(t: torch.Tensor) -> torch.Tensor:
    with torch._C.DisableTorchFunction():
        try:
            if t.is_sparse or t.is_nested or t.is_mkldnn:
                return t
            return t.view_as(t)
        except (RuntimeError, TypeError, NotImplementedError):
            return t


def distinct_result(name: str, args, kwargs, result):
    """``result`` with each tensor in it that is one of the call's tensor arguments replaced by a view."""
    if _inplace(name) or "out" in kwargs:
        return result
    inputs = _tensor_args(args)
    if not inputs:
        return result
    if isinstance(result, torch.Tensor):
        return _view_of(result) if any(result is a for a in inputs) else result
    if type(result) in (tuple, list) and any(isinstance(r, torch.Tensor) and any(r is a for a in inputs)
                                             for r in result):
        items = [_view_of(r) if isinstance(r, torch.Tensor) and any(r is a for a in inputs) else r for r in result]
        return items if type(result) is list else tuple(items)
    return result
