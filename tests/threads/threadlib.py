"""Helpers for the thread-isolation tests: the originals of everything tracing may patch, and
a handshake that makes two threads meet inside their traces."""
from __future__ import annotations

import builtins
import threading
import warnings

import numpy as np
import numpy.fft
import torch
import torch.jit._trace

ORIGINALS = {
    "builtins.range": (builtins, "range", builtins.range),
    "nn.Module.__call__": (torch.nn.Module, "__call__", torch.nn.Module.__dict__["__call__"]),
    "autograd.Function.apply": (torch.autograd.Function, "apply", torch.autograd.Function.__dict__["apply"]),
    "torch._C._is_tracing": (torch._C, "_is_tracing", torch._C._is_tracing),
    "torch.jit.is_tracing": (torch.jit, "is_tracing", torch.jit.is_tracing),
    "torch.jit._trace.is_tracing": (torch.jit._trace, "is_tracing", torch.jit._trace.is_tracing),
    # numpy's functions (trace/numpy_reads.py): a C function, a Python one, a bound draw, a submodule's
    "torch.Generator": (torch, "Generator", torch.Generator),   # python_state.py: made inside forward
    "numpy.zeros": (np, "zeros", np.zeros),
    "numpy.linspace": (np, "linspace", np.linspace),
    "numpy.random.default_rng": (np.random, "default_rng", np.random.default_rng),
    "numpy.random.normal": (np.random, "normal", np.random.normal),
    "numpy.fft.rfftfreq": (numpy.fft, "rfftfreq", numpy.fft.rfftfreq),
}


def assert_nothing_patched() -> None:
    """Every entry point tracing touches is the original object again; no warnings filter is left."""
    for label, (owner, name, original) in ORIGINALS.items():
        now = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        assert now is original, f"{label} is still patched: {now!r}"
    assert "training" not in torch.nn.Module.__dict__, "nn.Module.training is still a property"   # module_flags.py
    left = [f for f in warnings.filters if f[1] is not None and "tracejit" in repr(f[1])]
    assert not left, f"tracejit's warnings filter is still installed: {left}"


class Meeting:
    """``arrive(name)`` blocks until every expected thread has arrived once (later calls return at once)."""

    def __init__(self, names, timeout: float = 10.0):
        self.events = {n: threading.Event() for n in names}
        self.timeout = timeout

    def arrive(self, name: str) -> bool:
        self.events[name].set()
        return all(e.wait(self.timeout) for e in self.events.values())


def run_threads(*targets, timeout: float = 60.0):
    """Run each callable in its own thread; re-raise the first exception one of them raised."""
    errors: list[BaseException] = []

    def wrap(fn):
        def body():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported in the main thread
                errors.append(e)
        return body

    threads = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a test thread did not finish"
    if errors:
        raise errors[0]
