"""What a retrace writes in place into captured tensors, put back when it ends (hunt26).

A live traced object whose guard fails traces its original again on the call's inputs, then runs the new trace:
the user's forward runs twice for one call. Its writes into the module's buffers are put back after the retrace
(runtime/state.ModuleState), but a write into a tensor the trace captures as a constant (a plain tensor attribute
``self.count = torch.zeros(1)`` updated with ``self.count += 1``, a held helper's cached table, a module-level
tensor) was applied twice: once by the retrace, once by the program it made (eager applies it once).

While a retrace runs (``undone()``), the recorder notes each tensor an in-place op (or ``out=``) is about to write
that is not an input, a parameter, a buffer or a value the trace made (trace/captured_writes.py decides), and
its values are kept (a copy, once per tensor); when the retrace ends they are copied back.

>>> import torch
>>> t = torch.zeros(2)
>>> with undone() as log:
...     log.note(t); _ = t.add_(1)
>>> t
tensor([0., 0.])
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

_local = threading.local()


class WriteLog:
    """The captured tensors one retrace wrote, each with a copy of its values before the first write."""

    def __init__(self):
        self.saved: dict = {}   # id(tensor) -> (tensor, copy)

    def note(self, t: torch.Tensor) -> None:
        if id(t) not in self.saved:
            with torch._C.DisableTorchFunction():
                self.saved[id(t)] = (t, t.detach().clone())

    def restore(self) -> None:
        with torch.no_grad(), torch._C.DisableTorchFunction():
            for t, copy in self.saved.values():
                t.detach().copy_(copy)
        self.saved.clear()


def active() -> WriteLog | None:
    """The log of the retrace running on this thread, or None (a first trace: its writes are the call's)."""
    return getattr(_local, "log", None)


@contextmanager
def undone():
    """Run a retrace: the captured tensors it writes in place are put back when it ends."""
    previous = getattr(_local, "log", None)
    log = _local.log = WriteLog()
    try:
        yield log
    finally:
        _local.log = previous
        log.restore()
