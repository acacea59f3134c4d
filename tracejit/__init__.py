"""tracejit: the maintained successor of torch.jit's trace and trace_module.

>>> import torch, tracejit
>>> traced = tracejit.trace(lambda x: x.relu() * 2, torch.randn(3))
>>> traced(torch.tensor([-1.0, 1.0]))
tensor([0., 2.])

``import tracejit`` imports what loading and calling a saved program need (a server's start,
docs/DEPLOY.md); the tracer, ``optimize_for_inference``, the exporters, the viewer and ``migrate``
are imported the first time their name is used (PEP 562, ``lazy_names.py``).
"""
import sys as _sys

from .lazy_names import Package as _Package, resolve as _resolve
from .gc_pause import collector_paused as _collector_paused

_sys.modules[__name__].__class__ = _Package   # before any import of the subpackage tracejit.trace (lazy_names.py)

with _collector_paused():   # the imports' allocations would run the full collection `import torch` left due
    from .version import __version__  # noqa: E402
    from .errors import (ArgumentTypeError, ArgumentValueError, BackwardHookError, BudgetError, GuardError, LoadError,
                         ProgramNotFoundError, SaveError, TraceError, TracerWarning, TracingCheckError)
    from .runtime.traced import TracedFunction, TracedModule
    from .trace.ledger import LedgerEntry
    from .porting import load, save
    from . import user_methods  # noqa: F401  (gives the traced objects .save and .to_html)

__all__ = ["trace", "trace_module", "save", "load", "TracedFunction", "TracedModule", "is_tracing", "LedgerEntry",
           "TracerWarning", "TracingCheckError", "TraceError", "GuardError", "LoadError", "SaveError", "patch_torch_jit",
           "unpatch_torch_jit", "ArgumentTypeError", "ArgumentValueError", "BackwardHookError",
           "ProgramNotFoundError", "BudgetError", "export_onnx", "ExportError", "freeze", "optimize_for_inference",
           "migrate", "view"]


def __getattr__(name: str):
    """The public names imported on first use (``trace``, ``optimize_for_inference``, ``export_onnx``, ...) and
    tracejit's subpackages (``tracejit.export``)."""
    return _resolve(name)


def __dir__():
    return sorted(set(globals()) | set(__all__))
