"""A file never names uninitialized memory: ``save`` writes ``empty`` / ``empty_like`` / ``new_empty`` as
``zeros`` / ``zeros_like`` / ``new_zeros``.

``torch.empty_like(y).normal_(generator=g)`` is how real code makes noise (diffusers' samplers, initializers),
but the loader may not run ``empty*`` (their memory is whatever the process held before: a file could hand
it to its output; docs/SECURITY.md). The contents of an uninitialized tensor are unspecified, and zeros are
one of its possible contents, so a program that gave eager's answer with ``empty`` gives it with ``zeros``
(a program whose answer read the uninitialized memory had no defined answer to keep). The in-memory and
optimized programs keep ``empty`` (no fill); only the file changes. The schemas match argument for argument
(``empty.memory_format`` takes one keyword ``zeros`` lacks: a contiguous ``memory_format`` is the default and
is dropped; another stays ``empty``, which the save-time load check then refuses).
"""
from __future__ import annotations

import torch

AS_ZEROS = {"aten::empty_like.default": ("aten::zeros_like.default", "fn:torch.zeros_like"),
            "aten::new_empty.default": ("aten::new_zeros.default", "method:new_zeros"),
            "aten::empty.memory_format": ("aten::zeros.default", "fn:torch.zeros")}
_TARGETS = {"aten::empty_like.default": "fn:torch.empty_like", "aten::new_empty.default": "method:new_empty",
            "aten::empty.memory_format": "fn:torch.empty"}


def as_saved(op: str, target: str, kwargs: dict) -> tuple[str, str, dict]:
    """``(op, target, kwargs)`` as the file holds them: the zeros form of an ``empty*`` call, else unchanged."""
    if op not in AS_ZEROS or target != _TARGETS[op]:
        return op, target, kwargs
    if op == "aten::empty.memory_format":
        if kwargs.get("memory_format", None) not in (None, torch.contiguous_format):
            return op, target, kwargs
        kwargs = {k: v for k, v in kwargs.items() if k != "memory_format"}
    return (*AS_ZEROS[op], kwargs)
