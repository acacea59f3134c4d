"""The legacy ``Variable(t)`` constructor, seen by the recorder.

``torch.autograd.Variable(t)`` runs in C++ (``VariableMeta`` -> ``_LegacyVariableBase``), out of a
TorchFunctionMode's sight, so its result would be captured as a constant of the trace. While a thread
traces, the stand-in records it as what it computes: ``t.detach()`` (a new leaf sharing t's data),
made ``requires_grad`` when asked. Other threads, and other calls, get the original constructor.
"""
from __future__ import annotations

import torch
from torch.autograd.variable import VariableMeta

from . import patches
from .symbolic import get_tracer


def _variable_stand_in(original):
    def __call__(cls, data=None, *args, requires_grad=False, **kwargs):
        if get_tracer() is not None and isinstance(data, torch.Tensor) and not args and not kwargs:
            out = data.detach()
            return out.requires_grad_() if requires_grad else out
        extra = {"requires_grad": True} if requires_grad else {}
        return original(cls, *(() if data is None else (data,)), *args, **extra, **kwargs)
    return __call__


patches.register(VariableMeta, "__call__", _variable_stand_in)
