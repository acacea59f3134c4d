"""Errors and warnings that are part of tracejit's API."""


class TracerWarning(Warning):
    """A trace froze something that may not hold for other inputs.

    Raised as a warning each time Python reads a value out of a tensor while
    tracing (``bool(t)``, ``t.item()``, ...), when a size is specialized to a
    Python int, or when a tensor is captured as a constant. Every such event is
    also kept on the traced object's ``ledger``.
    """


class TracingCheckError(Exception):
    """The checker found that the traced program diverges from eager."""

    def __init__(self, message: str, *, graph_diff: str = "", details: str = ""):
        super().__init__(message)
        self.graph_diff = graph_diff
        self.details = details


class TraceError(RuntimeError):
    """Something in the traced code cannot be recorded (for example a backward hook)."""


class GuardError(RuntimeError):
    """A traced program was called in a state its trace did not cover (for example another training mode)."""


class LoadError(Exception):
    """A saved program could not be loaded: the file is damaged, from a newer tracejit, or not valid."""


class SaveError(OSError):
    """A program could not be saved: it holds something that is not data, or writing the file failed
    (then ``errno`` and ``filename`` say why and where). An ``OSError``, so file-error handlers catch it."""
