"""tracejit: the maintained successor of torch.jit's trace and trace_module.

>>> import torch, tracejit
>>> traced = tracejit.trace(lambda x: x.relu() * 2, torch.randn(3))
>>> traced(torch.tensor([-1.0, 1.0]))
tensor([0., 2.])
"""
import gc as _gc

# Importing tracejit creates some 180 modules' objects on top of torch's heap; the cyclic collector would
# walk that heap several times meanwhile (~90 ms of a server's start, bench/bench_serialize.py --fresh).
# It is paused for the import only, and left as the caller had it.
_gc_was_enabled = _gc.isenabled()
_gc.disable()

try:
    from .version import __version__  # noqa: E402

    from .api import trace, trace_module
    from .errors import (ArgumentTypeError, ArgumentValueError, BackwardHookError, BudgetError, GuardError, LoadError,
                         ProgramNotFoundError, SaveError, TraceError, TracerWarning, TracingCheckError)
    from .runtime.traced import TracedFunction, TracedModule
    from .trace.api import is_tracing
    from .trace.ledger import LedgerEntry
    from .porting import load, save
    from .patch import patch_torch_jit, unpatch_torch_jit
    from .export import ExportError, export_onnx
    from .inference import freeze, optimize_for_inference
    from .migrate import migrate
    from .viewer import view
    from . import user_methods  # noqa: F401  (gives the traced objects .save and .to_html)
finally:
    if _gc_was_enabled:
        _gc.enable()
del _gc_was_enabled

__all__ = ["trace", "trace_module", "save", "load", "TracedFunction", "TracedModule", "is_tracing", "LedgerEntry",
           "TracerWarning", "TracingCheckError", "TraceError", "GuardError", "LoadError", "SaveError", "patch_torch_jit",
           "unpatch_torch_jit", "ArgumentTypeError", "ArgumentValueError", "BackwardHookError",
           "ProgramNotFoundError", "BudgetError", "export_onnx", "ExportError", "freeze", "optimize_for_inference",
           "migrate", "view"]
