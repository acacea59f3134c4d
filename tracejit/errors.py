"""Errors and warnings that are part of tracejit's API.

Each class inherits the class torch.jit's tracer raises in the same situation, so code written
for torch.jit (``except RuntimeError``, ``warnings.filterwarnings(category=torch.jit.TracerWarning)``)
keeps catching tracejit's. Only the classes are referenced here; nothing in torch.jit is called.
"""
import warnings

from torch.jit._trace import TracerWarning as _TorchTracerWarning
from torch.jit._trace import TracingCheckError as _TorchTracingCheckError


class TracerWarning(_TorchTracerWarning):
    """A trace froze something that may not hold for other inputs.

    Raised as a warning each time Python reads a value out of a tensor while
    tracing (``bool(t)``, ``t.item()``, ...), when a size is specialized to a
    Python int, or when a tensor is captured as a constant. Every such event is
    also kept on the traced object's ``ledger``. A subclass of torch.jit's
    TracerWarning: filters written for torch's class also match tracejit's.
    """

    @staticmethod
    def ignore_lib_warnings():
        """Ignore TracerWarnings raised from inside torch's own modules (as torch.jit's class does)."""
        warnings.filterwarnings("ignore", category=TracerWarning, module="torch.(?!jit)")


class TracingCheckError(_TorchTracingCheckError, RuntimeError):
    """The checker found that the traced program diverges from eager.

    A subclass of torch.jit's TracingCheckError and of RuntimeError.
    """

    def __init__(self, message: str, *, graph_diff: str = "", details: str = ""):
        RuntimeError.__init__(self, message)
        self.message = message
        self.graph_diff = graph_diff
        self.details = details

    def __str__(self) -> str:
        return self.message


class TraceError(RuntimeError):
    """Something in the traced code cannot be recorded."""


class FirstCallSetUpError(TraceError):
    """Every change forward made to the hierarchy's Python state sets an attribute the module did not have before
    (a set-up done once, on the first call: transformers' output capturing installs its hooks and sets
    ``_output_capturing_hooks_installed``). The trace records forward again from the state that call left, as
    eager's second call would run, where nothing else changed (trace/attempts.py); else this error stands."""


class BackwardHookError(TraceError, ValueError):
    """A module of the traced hierarchy has a backward hook (a ValueError, as in torch.jit)."""


class ArgumentTypeError(TypeError, RuntimeError):
    """A traced program was called with arguments of another structure or kind than its trace took
    (or example inputs are of a kind trace() does not take, e.g. example_kwarg_inputs not a dict).

    A TypeError, and a RuntimeError as torch.jit's traced programs raise for such a call.
    """


class ArgumentValueError(ValueError, RuntimeError):
    """A traced program was called with a value its trace fixed (a constant argument) set otherwise.

    A ValueError, and a RuntimeError as torch.jit's traced programs raise for such a call.
    """


class GuardError(RuntimeError):
    """A traced program was called on inputs its trace did not cover: a guard failed.

    ``guard`` is the failed ``tracejit::guard`` node (None for errors raised elsewhere),
    ``expected`` the outcome the trace relied on, ``seen`` the value at this call and
    ``source`` the user's source line that made the guard.
    """

    def __init__(self, message: str, *, guard=None, expected=None, seen=None, source=None):
        super().__init__(message)
        self.guard = guard
        self.expected = expected
        self.seen = seen
        self.source = source


class LoadError(RuntimeError):
    """A saved program could not be loaded: the file is damaged, from a newer tracejit, or not valid.

    A RuntimeError, as torch.jit's load raises on a file it cannot read.
    """


class BudgetError(RuntimeError):
    """A program loaded from a file asked, at call time, for more than its budget: an op would
    allocate more elements than max(floor, a multiple of the file's size, a multiple of the op's
    largest input), or int arithmetic on traced sizes would leave 64 bits (docs/SECURITY.md).

    Raised before the op runs, naming the op and the source line that recorded it. A RuntimeError,
    as the allocation itself would have raised one. Programs traced in this process never raise it.
    """


class ProgramNotFoundError(LoadError, ValueError):
    """``load`` was given a path that does not exist (a ValueError too, as torch.jit's load raises)."""


class SaveError(OSError):
    """A program could not be saved: it holds something that is not data, or writing the file failed
    (then ``errno`` and ``filename`` say why and where). An ``OSError``, so file-error handlers catch it."""
