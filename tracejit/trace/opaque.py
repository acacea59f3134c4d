"""Inputs and outputs tracejit cannot flatten are refused, never frozen.

A leaf of a traced call's inputs or outputs that is neither a tensor nor a plain
constant, and that holds tensors (transformers' ``DynamicCache``, a dataclass not
registered with ``torch.utils._pytree``), would be frozen at its trace-time value:
the tensors in it are not recorded. Such a leaf raises TraceError naming its type,
where it sits in the structure and the source line.
"""
from __future__ import annotations

import enum

import torch

from ..errors import TraceError
from ..pytree import flatten

_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout,
          torch.memory_format, slice, type(Ellipsis), enum.Enum, torch.Size)


def holds_tensors(obj, depth: int = 0, seen=None) -> bool:
    """Does ``obj`` (an object, list, dict, ...) hold a tensor within a few levels of attributes?"""
    if isinstance(obj, torch.Tensor):
        return True
    if depth > 4 or isinstance(obj, _PLAIN) or callable(obj) and not hasattr(obj, "__dict__"):
        return False
    seen = seen if seen is not None else set()
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    if isinstance(obj, torch.nn.Module):
        return False   # a module passed along is code and weights, not data of this call
    if isinstance(obj, (list, tuple, set, frozenset)):
        return any(holds_tensors(o, depth + 1, seen) for o in obj)
    if isinstance(obj, dict):
        return any(holds_tensors(o, depth + 1, seen) for o in obj.values())
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and any(holds_tensors(o, depth + 1, seen) for o in attrs.values()):
        return True
    return any(holds_tensors(getattr(obj, name, None), depth + 1, seen) for name in _slot_names(type(obj)))


def _slot_names(cls) -> list:
    names = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    return [n for n in names if n not in ("__dict__", "__weakref__")]


def check_leaves(obj, what: str, where) -> None:
    """Raise if a leaf of ``obj`` is an object holding tensors that the trace would freeze."""
    leaves, spec = flatten(obj)
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor) or isinstance(leaf, _PLAIN):
            continue
        if holds_tensors(leaf):
            name = type(leaf).__qualname__
            shape = spec.describe([f"<{name}>" if j == i else "_" for j in range(len(leaves))])
            raise TraceError(
                f"{what} holds a {name} object (at {shape}) at {where}: tracejit cannot flatten "
                f"it, so the tensors inside it would be frozen at their trace-time values. Register {name} with "
                "torch.utils._pytree.register_pytree_node, or pass and return its tensors instead "
                "(for transformers' caches: use_cache=False).")
