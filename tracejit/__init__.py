"""tracejit: the maintained successor of torch.jit's trace and trace_module.

>>> import torch, tracejit
>>> traced = tracejit.trace(lambda x: x.relu() * 2, torch.randn(3))
>>> traced(torch.tensor([-1.0, 1.0]))
tensor([0., 2.])
"""
from .version import __version__

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

__all__ = ["trace", "trace_module", "save", "load", "TracedFunction", "TracedModule", "is_tracing", "LedgerEntry",
           "TracerWarning", "TracingCheckError", "TraceError", "GuardError", "LoadError", "SaveError", "patch_torch_jit",
           "unpatch_torch_jit", "ArgumentTypeError", "ArgumentValueError", "BackwardHookError",
           "ProgramNotFoundError", "BudgetError", "export_onnx", "ExportError", "freeze", "optimize_for_inference",
           "migrate", "view"]
