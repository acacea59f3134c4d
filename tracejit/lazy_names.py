"""The public names of ``tracejit`` that are imported the first time they are used (PEP 562).

A server that loads and calls saved programs needs neither the tracer nor ``optimize_for_inference``,
the exporters (onnx), the viewer or ``migrate``; ``import tracejit`` leaves them out (bench/fresh_load.py,
tests/serve/test_lazy_import.py) and ``tracejit.trace`` & co import them on first use. Python's import
lock makes two threads that touch a name first at the same time import its module once, and the second
wait until it is complete; the package's dict only ever receives the value the module holds, so a
concurrent first use caches the same object twice, harmlessly.

Tracing needs nothing here: the stand-ins the recorder registers at import (trace/patches.py and the
modules that register with it, listed by trace/api.py) are imported by ``tracejit.api`` before it can
start a trace, whichever public name was touched first.

``tracejit.trace`` names two things: the function, and the subpackage ``tracejit/trace/`` (so does
``tracejit.migrate``). Importing the subpackage for the first time binds it as the package's attribute
``trace`` (the import system's ``setattr``), which the loader's own imports do (serialize/program_decoder.py
reads trace/ledger.py). ``Package`` keeps the attribute the function: a data descriptor on the package's
type, which the import system's binding does not replace. Assigning another value (a test's monkeypatch)
still works.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types

from .gc_pause import collector_paused

PACKAGE = "tracejit"

LAZY = {"trace": ".api", "trace_module": ".api", "is_tracing": ".trace.api",
        "patch_torch_jit": ".patch", "unpatch_torch_jit": ".patch",
        "export_onnx": ".export", "ExportError": ".export",
        "freeze": ".inference", "optimize_for_inference": ".inference",
        "migrate": ".migrate", "view": ".viewer"}

_assigned: dict = {}   # ``tracejit.trace = value`` by a user or a test (_FunctionOverSubpackage)


def resolve(name: str):
    """The value of ``tracejit.<name>``: a lazy public name (cached in the package once imported) or a
    subpackage. Anything else is an AttributeError, as for a plain module."""
    where = LAZY.get(name)
    if where is not None:
        with collector_paused():   # the import's allocations would run the collection `import torch` left due
            value = getattr(importlib.import_module(where, PACKAGE), name)
        if not isinstance(getattr(Package, name, None), _FunctionOverSubpackage):   # those stay behind Package
            vars(sys.modules[PACKAGE])[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{PACKAGE}.{name}") is not None:
        with collector_paused():
            return importlib.import_module(f"{PACKAGE}.{name}")
    raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")


class _FunctionOverSubpackage:
    """``tracejit.<name>`` as the function of that name, though a subpackage has the same name (``trace``,
    ``migrate``): a data descriptor, so the import system's binding of the subpackage lands in the module's
    dict, out of sight; another assigned value (a test's monkeypatch) is returned until it is deleted."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, package, owner=None):
        if package is None:
            return self
        if self.name in _assigned:
            return _assigned[self.name]
        return resolve(self.name)

    def __set__(self, package, value):
        if isinstance(value, types.ModuleType) and value.__name__ == f"{PACKAGE}.{self.name}":
            vars(package)[self.name] = value   # the import system binding the subpackage
            return
        _assigned[self.name] = value

    def __delete__(self, package):
        if _assigned.pop(self.name, None) is None:
            raise AttributeError(self.name)


class Package(types.ModuleType):
    """The type of the ``tracejit`` module: ``tracejit.trace`` and ``tracejit.migrate`` are functions."""
    trace = _FunctionOverSubpackage("trace")
    migrate = _FunctionOverSubpackage("migrate")
