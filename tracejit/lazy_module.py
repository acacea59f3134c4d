"""A module imported the first time one of its attributes is read: the one way tracejit's own code defers
importing another of its modules (issue #24 item 5).

Declared at module level, beside the file's imports, so the dependency is in plain sight:
``scripts/import_graph.py`` reads every ``LazyModule(".name", __package__)`` as an edge of the import graph
(checked like a function-level import: no cycle, no upward edge) and tests/arch/test_import_graph.py lists
each with its reason. tracejit defers the writer behind ``serialize.save``, the viewer behind ``.to_html`` and
what only a retrace of a live object needs (the inliner, its private random and module state: a server that loads
and calls a program imports none of them, issue #22's start time), and the ONNX exporter behind
``tracejit.export.export_onnx`` (it needs onnxscript, an optional dependency).

>>> from tracejit.lazy_module import LazyModule
>>> text = LazyModule("textwrap")
>>> text.dedent("  a")
'a'

Python's import lock makes threads that read an attribute first at the same time import the module once.
"""
from __future__ import annotations

import importlib

from .gc_pause import collector_paused


class LazyModule:
    """``name`` (relative to ``package`` when it starts with a dot), imported on first attribute access."""

    def __init__(self, name: str, package: str | None = None):
        self.__dict__.update(_name=name, _package=package, _module=None)

    def __getattr__(self, attr: str):
        if attr.startswith("__"):   # copy / pickle / introspection probing: no import for it
            raise AttributeError(attr)
        module = self.__dict__["_module"]
        if module is None:
            with collector_paused():   # the import's allocations would run the collection `import torch` left due
                module = importlib.import_module(self._name, self._package)
            self.__dict__["_module"] = module
        return getattr(module, attr)

    def __repr__(self) -> str:
        state = "imported" if self.__dict__["_module"] is not None else "not imported yet"
        return f"<LazyModule {self._name!r} of {self._package!r}, {state}>"
