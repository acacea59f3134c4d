"""``torch.ceil`` / ``floor`` / ``trunc`` / ``fix`` / ``round`` of a traced float: math's rounding, recorded.

Under ``torch.jit.trace`` a size is a 0-d tensor, so library code that asks ``torch.jit.is_tracing()`` rounds
sizes with torch's functions: transformers' MobileViT computes
``torch_int(torch.ceil(orig_height / patch_height) * patch_height)``. Under tracejit a size is a ``TracedInt``
and ``orig_height / patch_height`` a ``TracedFloat`` (symfloat.py), which torch's argument parser refused
("ceil(): argument 'input' must be Tensor, not TracedFloat"): the model did not trace.

``TracedFloat.__torch_function__`` (installed below) makes the parser hand such a call to tracejit: the
recorder (``recorder._dispatch``) answers a rounding function of a traced float with what ``math.ceil``
(``floor``, ``trunc``, ``round``) gives, a ``tracejit::sym_math`` node and a TracedInt, so the size stays
symbolic until the code reads it as a plain int (``torch_int`` calls ``int()``: guarded, as every read). Any
other torch function handed a TracedFloat where it takes a tensor runs on the plain float, as it did before the
attribute existed (the parser then takes the number as a wrapped scalar, as for any float).
"""
from __future__ import annotations

import math

import torch

from .provenance import TracedFloat

_ROUNDING = {torch.ceil: math.ceil, torch.floor: math.floor, torch.trunc: math.trunc, torch.fix: math.trunc,
             torch.round: round}
NOT_ROUNDING = object()


def rounding(func, args, kwargs):
    """``math``'s rounding of ``args[0]`` when ``func`` is torch's rounding function of one traced float (no
    ``decimals``, no ``out``), else ``NOT_ROUNDING``."""
    fn = _ROUNDING.get(func)
    if fn is None or len(args) != 1 or kwargs or not isinstance(args[0], TracedFloat):
        return NOT_ROUNDING
    return fn(args[0])   # TracedFloat.__ceil__ ...: recorded as tracejit::sym_math (symfloat.py)


def _plain(x):
    if isinstance(x, TracedFloat):
        return float.__float__(x)
    if type(x) in (list, tuple):
        return type(x)(_plain(v) for v in x)
    return x


def _torch_function(cls, func, types, args=(), kwargs=None):
    """A torch function handed a TracedFloat where it takes a tensor (no mode active: the recorder's own
    call, or a thread that is not tracing): rounding as above, anything else on the plain float."""
    kwargs = kwargs or {}
    found = rounding(func, args, kwargs)
    if found is not NOT_ROUNDING:
        return found
    return func(*_plain(tuple(args)), **{k: _plain(v) for k, v in kwargs.items()})


TracedFloat.__torch_function__ = classmethod(_torch_function)
