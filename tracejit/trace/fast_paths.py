"""``torch.overrides.has_torch_function(args)`` answered as eager would, where it chooses a path (hunt27).

torch's ``nn.TransformerEncoder``, ``TransformerEncoderLayer`` and ``MultiheadAttention`` take a fast path in
eval mode without grad (``torch._nested_tensor_from_mask``, ``torch._transformer_encoder_layer_fwd``,
``torch._native_multi_head_attention``) unless, among other conditions, ``torch.overrides.has_torch_function``
says some argument has a ``__torch_function__``. While tracing it always said yes: the recorder is a
TorchFunctionMode. The trace froze the slow path, and eager, served under ``torch.no_grad()`` with a padding
mask, took the nested-tensor path, whose padded positions are zeros: the program's answer differed, silently
(with check_trace on, every such trace under no_grad was refused instead: the model could not be served).

The stand-in answers for the calling thread's trace as eager would (a ``__torch_function__`` of an argument's
own type; another mode on the stack), so the trace takes eager's path; the other conditions of those chains
are guarded where they are read (``torch.is_grad_enabled()``: global_state.py; the training flag;
``torch.backends.mha.get_fastpath_enabled()``: backend_flags.py). Default-deny on the callers: a function whose code names
``handle_torch_function`` (a dispatch hop: ``if has_torch_function(a): return handle_torch_function(...)``) gets
the original answer, which the recorder needs to see the call.
"""
from __future__ import annotations

import sys
import types

import torch
import torch.overrides

from . import patches
from .symbolic import get_tracer

_PLAIN_TF = (getattr(torch.Tensor.__torch_function__, "__func__", torch.Tensor.__torch_function__),
             torch._C._disabled_torch_function_impl)
_hops: dict = {}


def _dispatch_hop(code: types.CodeType) -> bool:
    r = _hops.get(code)
    if r is None:
        r = _hops[code] = any("handle_torch_function" in n for n in code.co_names)
    return r


def _eager_answer(args) -> bool:
    """``has_torch_function(args)`` without the tracer's mode: an argument whose type has a ``__torch_function__``
    of its own, or another TorchFunctionMode on the stack."""
    if any(not _is_recorder(m) for m in torch.overrides._get_current_function_mode_stack()):
        return True
    for a in args:
        f = getattr(type(a), "__torch_function__", None)
        if f is not None and getattr(f, "__func__", f) not in _PLAIN_TF:
            return True
    return False


def _is_recorder(mode) -> bool:
    return type(mode).__module__.startswith("tracejit.")


def _stand_in(original):
    def has_torch_function(args):
        if get_tracer() is None:
            return original(args)
        caller = sys._getframe(1).f_code
        if _dispatch_hop(caller):
            return original(args)
        return _eager_answer(args)
    has_torch_function.__name__ = "has_torch_function"
    has_torch_function.__doc__ = getattr(original, "__doc__", None)
    has_torch_function.__wrapped__ = original
    return has_torch_function


patches.register(torch.overrides, "has_torch_function", _stand_in)
