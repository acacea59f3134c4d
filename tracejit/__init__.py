"""tracejit: the maintained successor of torch.jit.trace and torch.jit.trace_module.

>>> import torch, tracejit
>>> traced = tracejit.trace(lambda x: x.relu() * 2, torch.randn(3))
>>> traced(torch.tensor([-1.0, 1.0]))
tensor([0., 2.])
"""
from .api import trace, trace_module
from .errors import GuardError, TraceError, TracerWarning, TracingCheckError
from .runtime.traced import TracedFunction, TracedModule
from .trace.api import is_tracing
from .trace.ledger import LedgerEntry

__all__ = ["trace", "trace_module", "TracerWarning", "TracingCheckError", "TraceError", "GuardError", "TracedFunction",
           "TracedModule", "is_tracing", "LedgerEntry"]
__version__ = "0.1.0"
