"""The executor interface every backend implements, and the table of backends by name.

A backend is one module with ``NAME`` (a string) and ``build(traced, **options)``, which returns a
callable taking the traced program's arguments and answering as eager would, with a ``.backend``
attribute naming it. It follows the shared fallback policy (backends/fallback.py) and keeps every
specialization of the traced program (backends/specializations.py for exported models). ``BACKENDS``
maps each name to its module, imported on first use (onnxruntime and OpenVINO are optional
dependencies); ``register`` adds one (docs/DESIGN.md, "Adding a backend").
"""
from __future__ import annotations

import importlib
from typing import Any, Protocol


class Executor(Protocol):
    """What ``build`` returns: called like the traced program; ``backend`` names who runs it."""

    backend: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


class Backend(Protocol):
    """A backend module: ``NAME`` and ``build(traced, **options) -> Executor``."""

    NAME: str

    def build(self, traced, **options) -> Executor: ...


# name -> module (imported by ``backend_module`` on first use)
BACKENDS: dict[str, str] = {
    "torch": "tracejit.backends.torch_cpu",
    "onnxruntime": "tracejit.backends.onnxruntime",
    "openvino": "tracejit.backends.openvino",
    "program": "tracejit.backends.plain",
    "cuda_graphs": "tracejit.backends.cuda_graphs",
}


def register(name: str, module: str) -> None:
    """Make the backend module ``module`` (an importable name) buildable as ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a backend name is a non-empty string; got {name!r}")
    BACKENDS[name] = module


def backend_module(name: str) -> Backend:
    """The module of backend ``name``; ValueError naming the known ones for any other name."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; expected one of {tuple(BACKENDS)}")
    module = importlib.import_module(BACKENDS[name])
    if getattr(module, "NAME", None) != name or not callable(getattr(module, "build", None)):
        raise TypeError(f"backend module {BACKENDS[name]} must define NAME = {name!r} and build(traced, **options)")
    return module


def build(name: str, traced, **options) -> Executor:
    """Build backend ``name``'s executor for ``traced`` (a TracedModule or TracedFunction)."""
    executor = backend_module(name).build(traced, **options)
    if getattr(executor, "backend", None) is None:
        raise TypeError(f"backend {name!r} built {type(executor).__name__} without a .backend attribute")
    return executor
