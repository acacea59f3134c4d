"""Which tensors an in-place op recorded during a retrace writes that the retrace must put back
(support/captured_writes.py): the written tensor's base, unless it is a parameter or buffer (runtime/state.py puts
buffers back), an input or a value the trace made."""
from __future__ import annotations

import torch

from ..ops.names import CONSTANT
from ..support import captured_writes


def note(tracer, name: str, args, kwargs) -> None:
    """Before ``name`` runs: keep the values of the captured tensors it writes (only while a retrace runs)."""
    log = captured_writes.active()
    if log is None or not (_in_place(name) or "out" in kwargs):
        return
    targets = [args[0]] if args else []
    out = kwargs.get("out")
    targets += list(out) if isinstance(out, (tuple, list)) else [out]
    for t in targets:
        if isinstance(t, torch.Tensor):
            base = t._base if t._base is not None else t
            if _captured(tracer, base):
                log.note(base)


def _in_place(name: str) -> bool:
    return (name.startswith("__i") and name.endswith("__")) or (name.endswith("_") and not name.endswith("__"))


def _captured(tracer, t) -> bool:
    """Is ``t`` a tensor the trace holds as a constant (or will, read for the first time)?"""
    if id(t) in tracer.param_names:
        return False
    for frame in reversed(tracer.frames):
        v = frame.env.get(id(t))
        if v is None or v.capture:   # not seen in this frame, or a value of an outer one
            continue
        return v.producer is not None and v.producer.op == CONSTANT
    return True
