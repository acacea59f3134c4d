"""``torch.overrides.has_torch_function(args)`` answered as eager would where it chooses a nested-tensor path (hunt27).

``nn.TransformerEncoder`` in eval mode without grad and with a padding mask runs its layers on a nested tensor
(``torch._nested_tensor_from_mask``) and pads the result with zeros, unless, among other conditions,
``torch.overrides.has_torch_function`` says some argument has a ``__torch_function__``. While tracing it always said
yes (the recorder is a TorchFunctionMode): the trace froze the dense path, and eager, served under
``torch.no_grad()``, answered zeros at the padded positions where the program had values, silently (with check_trace
on, every such trace under no_grad was refused instead: the model could not be served).

The stand-in answers for the calling thread's trace as eager would (an argument whose type has a
``__torch_function__`` of its own; another mode on the stack) where the answer chooses between a nested-tensor path
and a dense one, whose answers differ: the caller's code names a nested-tensor constructor (``*nested_tensor*``:
TransformerEncoder.forward), or an argument is a nested tensor (its layers then). The trace takes eager's path, and
the other conditions of the choice are guarded where they are read (``torch.is_grad_enabled()``, the training flag,
``torch.backends.mha.get_fastpath_enabled()``). Elsewhere the recorder's answer stays: a dispatch hop
(``if has_torch_function(a): return handle_torch_function(...)``) needs it to see the call, and the layers' and
MultiheadAttention's dense fast paths compute the same math as their recorded ops (which passes and exporters know)
up to rounding.
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


def _chooses_nested(code: types.CodeType) -> bool:
    """Does ``code`` make nested tensors (and not dispatch through ``handle_torch_function``)?"""
    r = _hops.get(code)
    if r is None:
        r = _hops[code] = any("nested_tensor" in n for n in code.co_names) and not any(
            "handle_torch_function" in n for n in code.co_names)
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


def _any_nested(args) -> bool:
    with torch._C.DisableTorchFunction():   # not a read of the traced code: the recorder must not see it
        return any(a.is_nested for a in args if isinstance(a, torch.Tensor))


def _is_recorder(mode) -> bool:
    return type(mode).__module__.startswith("tracejit.")


def _stand_in(original):
    def has_torch_function(args):
        if get_tracer() is None:
            return original(args)
        if _chooses_nested(sys._getframe(1).f_code) or _any_nested(args):
            return _eager_answer(args)
        return original(args)
    has_torch_function.__name__ = "has_torch_function"
    has_torch_function.__doc__ = getattr(original, "__doc__", None)
    has_torch_function.__wrapped__ = original
    return has_torch_function


patches.register(torch.overrides, "has_torch_function", _stand_in)
