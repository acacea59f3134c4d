"""Global torch state read by traced code is guarded at the line that read it.

Traced code that asks ``torch.is_grad_enabled()``, ``torch.is_autocast_enabled('cpu')``,
``torch.get_default_dtype()``, ``torch.are_deterministic_algorithms_enabled()``,
``torch.is_inference_mode_enabled()`` ... and branches on the answer would freeze the trace-time
answer. Every ``torch`` function whose name starts with ``is_``, ``are_`` or ``get_``
(ir/state_tests.readers(): found by name, so a new torch reader is covered without editing a list)
gets a stand-in while tracing (trace/patches.register); a call from the tracing thread with no
argument or one device-type name records a ``state`` guard: the call itself is the predicate,
evaluated again at every call of the program (``str(...)`` of a dtype / device answer).

Not guarded: a read whose answer the traced code fixed itself (``torch.is_grad_enabled()`` inside
a ``torch.no_grad()`` block of the traced code: the recorded region sets it at every call; the same
for autocast), reads made by tracejit (and by the code it generates: a traced program called inside a
trace asks for the grad mode only to pick in-place forms of the same ops), and the reads torch's grad-mode / autocast context managers
make to restore the previous state on exit (they decide nothing).
"""
from __future__ import annotations

import os
import sys

import torch

from ..ir.state_tests import DEVICE_TYPES, readers, state_test
from . import autocast_mode, patches
from .source import user_location
from .symbolic import get_tracer

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TRACEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# torch files whose reads only save the state a context manager restores on exit
_RESTORERS = tuple(os.path.join(_TORCH_DIR, *p) for p in (
    ("autograd", "grad_mode.py"), ("amp", "autocast_mode.py"), ("utils", "_contextlib.py"), ("overrides.py",),
    ("autograd", "profiler.py"), ("_jit_internal.py",)))
_GRAD_READERS = {"is_grad_enabled", "is_inference_mode_enabled"}
_ignored_files: dict[str, bool] = {}


def _ignored(filename: str) -> bool:
    r = _ignored_files.get(filename)
    if r is None:
        r = _ignored_files[filename] = filename.startswith((_TRACEJIT_DIR, "<tracejit")) or filename in _RESTORERS
    return r


def _set_by_traced_code(tracer, name: str) -> bool:
    """Did the traced code itself set the state this reader answers (a recorded region fixes it)?"""
    state = getattr(tracer, "grad_state", None)
    if state is None:
        return False
    if name in _GRAD_READERS:
        return state.region() is not None
    if "autocast" in name:
        return autocast_mode.region(state.autocast_entry, state.autocast_open) is not None
    return False


def on_read(tracer, name: str, args: tuple, kwargs: dict, result) -> None:
    """Guard the answer of ``torch.<name>(*args)`` when it is a global-state read of the traced code."""
    if kwargs or len(args) > 1 or not tracer.frames:
        return
    device = None
    if args:
        device = args[0].type if isinstance(args[0], torch.device) and args[0].index is None else args[0]
        if not isinstance(device, str) or device not in DEVICE_TYPES:
            return   # an argument other than a device type: a function of its argument, not of global state
    if isinstance(result, (torch.dtype, torch.device)):
        expected, by_name = str(result), True
    elif isinstance(result, (bool, int, float, str)):
        expected, by_name = result, False
    else:
        return
    if _set_by_traced_code(tracer, name):
        return
    loc = user_location(3)
    test = state_test(name, device, by_name)
    tracer.ledger.add("state", f"`{test}` read global torch state", loc, expected, warn=False)
    tracer.guards.add("state", test, (), expected, expected, f"the trace read global torch state ({test})", loc)


def _make_stand_in(name: str):
    def make(original):
        def stand_in(*args, **kwargs):
            result = original(*args, **kwargs)
            tracer = get_tracer()
            if tracer is not None and not _ignored(sys._getframe(1).f_code.co_filename):
                on_read(tracer, name, args, kwargs, result)
            return result
        stand_in.__name__ = getattr(original, "__name__", name)
        stand_in.__qualname__ = getattr(original, "__qualname__", name)
        stand_in.__doc__ = getattr(original, "__doc__", None)
        stand_in.__wrapped__ = original
        return stand_in
    return make


for _name in sorted(readers()):
    patches.register(torch, _name, _make_stand_in(_name))
