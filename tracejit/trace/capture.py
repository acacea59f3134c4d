"""The process-wide patches behind device/dtype-relative capture (``torch.finfo``), grad-mode regions
(torch's grad-mode context managers) and TorchScript tracing (``ScriptFunction.__call__``,
scripted modules' ``forward``).

They are installed once while any trace records and removed when the last one ends
(reference-counted under a lock), so traces on several threads never restore each other's
patches. Each patched function acts only for the trace recording on the calling thread
(``get_tracer()``); everywhere else it behaves as torch's own.
"""
from __future__ import annotations

import contextlib
import threading

import torch

from . import grad_mode, provenance, scripted

_lock = threading.Lock()
_users = 0
_saved: dict = {}


@contextlib.contextmanager
def patches(tracer):
    global _users
    tracer.grad_state = grad_mode.GradModeState()
    with _lock:
        if _users == 0:
            _install()
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                _uninstall()


def _install() -> None:
    _saved["finfo"] = torch.finfo
    torch.finfo = provenance.make_finfo(torch.finfo)
    _saved["grad"] = grad_mode.install()
    _saved["scripted"] = scripted.install()


def _uninstall() -> None:
    scripted.uninstall(_saved.pop("scripted"))
    grad_mode.uninstall(_saved.pop("grad"))
    torch.finfo = _saved.pop("finfo")


def installed() -> bool:
    """Are the patches in place (for tests of the global state)?"""
    return _users > 0
