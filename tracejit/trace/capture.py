"""The process-wide stand-ins behind device/dtype-relative capture (``torch.finfo``), grad-mode and
autocast regions (torch's context managers) and TorchScript tracing (``ScriptFunction.__call__``,
scripted modules' ``forward``).

They join trace/patches.py's counted install (``patches.register``): in place while any thread
traces, each acting only for the calling thread's tracer (``get_tracer()``) and otherwise doing
exactly what torch's own does.
"""
from __future__ import annotations

import contextlib

import torch

from . import grad_mode, patches, provenance, scripted


def _register() -> None:
    patches.register(torch, "finfo", provenance.make_finfo)
    for owner, name, make in grad_mode.stand_ins() + scripted.stand_ins():
        patches.register(owner, name, make)


_register()


@contextlib.contextmanager
def patches_for(tracer):
    """Per-trace state the stand-ins use: the grad-mode / autocast state the trace started in."""
    tracer.grad_state = grad_mode.GradModeState()
    yield
