"""Lazy imports of the optional ONNX stack (the ``onnx`` extra)."""
from __future__ import annotations

import importlib

_EXTRA_HINT = "pip install 'tracejit[onnx]' (it installs onnx, onnx-ir, onnxscript and onnxruntime)"


def require(module: str, needed_by: str = "ONNX export and onnxruntime backend", hint: str = _EXTRA_HINT):
    """Import ``module`` or raise an ImportError that names the ``onnx`` extra (or ``hint``)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"tracejit's {needed_by} need the package '{module.split('.')[0]}' "
                          f"which is not installed: {hint}") from e
