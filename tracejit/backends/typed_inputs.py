"""Inputs made from a graph's recorded input types, for building-time timings (auto_backend.py, cuda_pass_choice.py).

A tensor input becomes a tensor of its recorded dtype, shape and device: floats standard-normal from a private
generator (the caller's random numbers are untouched), booleans True, integers zeros (a valid index into any
table: token ids, positions). A leaf recorded as a constant stays that constant. None where a tensor input has no
fixed size (a nested tensor's ragged dimensions) or a dtype other than a float, an integer or a boolean.

>>> import torch, tracejit
>>> traced = tracejit.trace(lambda x, ids: x[ids], (torch.randn(4, 3), torch.tensor([0, 2])))
>>> args, kwargs = inputs_of_types(traced.graph)
>>> [(tuple(a.shape), a.dtype) for a in args], kwargs
([((4, 3), torch.float32), ((2,), torch.int64)], {})
>>> args[1].tolist()
[0, 0]
"""
from __future__ import annotations

from typing import Optional

import torch

from .. import pytree
from ..ir import TensorType, Value

INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def inputs_of_types(graph) -> Optional[tuple[tuple, dict]]:
    """``(args, kwargs)`` of tensors of ``graph``'s recorded input types (module docstring), or None."""
    if graph.in_spec is None:
        return None
    gen = torch.Generator().manual_seed(0)
    leaves = []
    for leaf in graph.input_leaves:
        if not isinstance(leaf, Value):
            leaves.append(leaf)
            continue
        made = _tensor_of(leaf.type, gen)
        if made is None:
            return None
        leaves.append(made)
    args, kwargs = pytree.unflatten(graph.in_spec, leaves)
    return tuple(args), dict(kwargs)


def _tensor_of(t, gen: torch.Generator) -> Optional[torch.Tensor]:
    if not isinstance(t, TensorType) or not all(isinstance(s, int) and s >= 0 for s in t.shape):
        return None
    if t.dtype.is_floating_point:
        made = torch.randn(t.shape, generator=gen).to(t.dtype)
    elif t.dtype == torch.bool:
        made = torch.ones(t.shape, dtype=torch.bool)
    elif t.dtype in INTEGERS:
        made = torch.zeros(t.shape, dtype=t.dtype)
    else:
        return None
    return made.to(t.device)
