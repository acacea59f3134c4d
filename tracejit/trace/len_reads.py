"""``len(tensor)`` recorded as what ``tensor.shape[0]`` records (issue #25: torchvision's pooler
``num_rois = len(rois)``, the number of regions an image gave).

CPython's ``len()`` turns what ``__len__`` returns into a plain int, so ``len(t)`` of a tensor whose first size
depends on the inputs (or on the data: ``x[mask]``, the boxes nms kept) could only be frozen, with a ``length``
guard: the pooler's ``torch.zeros((num_rois, ...))`` then held the traced region count, and every program built
without the original (ONNX, a loaded file) failed on an image that gave another count. torch.jit.trace freezes
it too (``Tensor.__len__`` returns ``shape[0]`` with a TracerWarning): its program fails or answers with the
traced count.

While any thread traces, ``builtins.len`` is a stand-in (trace/patches.register). In the tracing thread, for a
tensor, it asks ``Tensor.__len__`` through the tracer's mode, which answers ``tensor.size(0)``: a TracedInt bound
to an ``aten::size.int`` node where the size follows the inputs, a plain int where it is a constant. A TracedInt is
as safe as ``t.shape[0]`` is: every way it becomes a plain value is guarded where it happens (``if len(x) > 2``
guards ``s0 > 2``, ``range(len(x))`` and ``int(len(x))`` the value; number_escapes.py, index_reads.py). Every
other call is the builtin's, and so is ``len`` bound before the trace started (``from builtins import len``, a
default argument): the recorder then still freezes and guards it (the ``length`` guard). A 0-d tensor raises
the builtin's TypeError.
"""
from __future__ import annotations

import builtins
import threading

import torch

from . import patches
from .symbolic import TracedInt, get_tracer


class _Pending(threading.local):
    tensor = None   # the tensor whose ``len()`` the stand-in is asking for, in this thread


_pending = _Pending()


def asked_by_builtin(t) -> bool:
    """Is ``t.__len__`` being called by ``len(t)`` in this thread (the stand-in)? Answers once."""
    if _pending.tensor is t:
        _pending.tensor = None
        return True
    return False


def _make_len(original):
    def len(obj, /):   # noqa: A001  (it stands for the builtin)
        if isinstance(obj, torch.Tensor) and get_tracer() is not None:
            outer, _pending.tensor = _pending.tensor, obj
            try:
                n = type(obj).__len__(obj)   # through the tracer's mode when it records (recorder.py)
            finally:
                _pending.tensor = outer
            if isinstance(n, TracedInt) or type(n) is int and n >= 0:
                return n
        return original(obj)   # (a subclass's odd __len__ result: the builtin's check and error)
    len.__doc__ = original.__doc__
    return len


patches.register(builtins, "len", _make_len)
