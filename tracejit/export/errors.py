"""The error export raises."""
from __future__ import annotations


class ExportError(RuntimeError):
    """The traced program cannot be written as ONNX (an op without conversion, a guard, ...).

    ``op`` is the ATen op and ``source`` the user's source line that ran it, when known.
    """

    def __init__(self, message: str, op: str | None = None, source=None):
        where = f" (traced at {source})" if source is not None else ""
        super().__init__(f"{message}{where}")
        self.op = op
        self.source = source
