"""Tensor indexing (``x[idx]``, ``x[idx] = v``) decomposed into ATen ops.

PyTorch applies an index in two stages: basic indexing first (an int is
``aten::select``, a slice ``aten::slice``, ``None`` ``aten::unsqueeze``,
``...`` skips dims), then advanced indexing with the tensor indices
(``aten::index`` / ``aten::index_put_``). ``plan(x, idx)`` returns those
steps, or None for an index form we do not decompose (the recorder then
keeps one ``tracejit::getitem`` node).
"""
from __future__ import annotations

import torch


def plan(ndim: int, idx):
    """Steps for ``x[idx]`` on a tensor of rank ``ndim``: list of (kind, dim, payload)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    consumed = 0
    for it in items:
        if it is None or it is Ellipsis:
            continue
        if isinstance(it, bool):
            return None
        if isinstance(it, (int, slice)):
            consumed += 1
        elif isinstance(it, torch.Tensor):
            if it.dtype in (torch.bool, torch.uint8):
                consumed += it.dim()
            elif it.dtype in (torch.int64, torch.int32, torch.int16, torch.int8):
                consumed += 1
            else:
                return None
        else:
            return None
    if sum(1 for it in items if it is Ellipsis) > 1 or consumed > ndim:
        return None
    steps = []
    dim = 0
    advanced = []
    for it in items:
        if it is Ellipsis:
            dim += ndim - consumed
        elif it is None:
            steps.append(("unsqueeze", dim, None))
            dim += 1
        elif isinstance(it, int):
            steps.append(("select", dim, it))
        elif isinstance(it, slice):
            if not (it.start is None and it.stop is None and it.step in (None, 1)):
                steps.append(("slice", dim, it))
            dim += 1
        else:
            advanced.append((dim, it))
            dim += it.dim() if it.dtype in (torch.bool, torch.uint8) else 1
    if advanced:
        steps.append(("index", None, advanced))
    return steps


def index_expr(dim: int, inner: str) -> str:
    """Python subscript text that applies ``inner`` at ``dim``: ``[:, :, inner]``."""
    return "[" + ", ".join([":"] * dim + [inner]) + "]"


def slice_text(start: str, stop: str, step: str) -> str:
    text = f"{'' if start == 'None' else start}:{'' if stop == 'None' else stop}"
    if step not in ("None", "1"):
        text += f":{step}"
    return text


def advanced_text(indices, fmt) -> str:
    """``indices`` is aten::index's list (None for a dim left alone)."""
    parts = [":" if i is None else fmt(i) for i in indices]
    while parts and parts[-1] == ":":
        parts.pop()
    if len(parts) == 1:
        return "[" + parts[0] + "]"
    return "[" + ", ".join(parts) + "]"
