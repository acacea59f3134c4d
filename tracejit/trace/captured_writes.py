"""Which tensors an in-place op writes that are held outside the trace (a global, a closure, an item of a container
attribute, a held object's tensor): the written tensor's base, unless it is a parameter or buffer, an input or a
value the trace made. A retrace puts their values back (support/captured_writes.py; runtime/state.py puts buffers
back); every recording run lists them (``tracer.outside_writes``), so trace/attempts.py does not run forward a
second time over a write a caller sees (the write would be applied twice)."""
from __future__ import annotations

import torch

from ..ops.names import CONSTANT
from ..support import captured_writes
from .source import user_location


def note(tracer, name: str, args, kwargs) -> None:
    """Before ``name`` runs: list the captured tensors it writes on the tracer (``outside_writes``: where, in
    words), and keep their values while a retrace runs."""
    if not (_in_place(name) or "out" in kwargs):
        return
    targets = [args[0]] if args else []
    out = kwargs.get("out")
    targets += list(out) if isinstance(out, (tuple, list)) else [out]
    for t in targets:
        if isinstance(t, torch.Tensor):
            note_write(tracer, t)


def note_write(tracer, t: torch.Tensor) -> None:
    """Before ``t`` is written in place (an op, or ``t[i] = v``: trace/subscript.py): note its base if the trace
    did not make it."""
    base = t._base if t._base is not None else t
    try:   # by storage too: `.data` / `.detach()` of a parameter has a version counter of its own (attempts.py)
        tracer.written_storages.add(t.untyped_storage().data_ptr())
    except Exception:  # noqa: BLE001  (a tensor without storage: a subclass, meta, sparse)
        pass
    if _captured(tracer, base):
        tracer.outside_writes.append(f"a tensor of shape {tuple(base.shape)} held outside the module's parameters "
                                     f"and buffers (at {user_location(3) or '(line unknown)'})")
        log = captured_writes.active()
        if log is not None:
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
