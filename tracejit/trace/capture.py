"""The process-wide patches that make device/dtype-relative capture, grad-mode regions and
TorchScript tracing work, installed together for one trace (see grad_mode, provenance, scripted)."""
from __future__ import annotations

import contextlib

import torch

from . import grad_mode, provenance, scripted


@contextlib.contextmanager
def patches(tracer):
    saved_finfo = torch.finfo
    torch.finfo = provenance.make_finfo(tracer, saved_finfo)
    try:
        with grad_mode.recording(tracer), scripted.recording(tracer):
            yield
    finally:
        torch.finfo = saved_finfo
