"""Lazy imports of the optional ONNX stack (the ``onnx`` extra)."""
from __future__ import annotations

import importlib

_EXTRA_HINT = "pip install 'tracejit[onnx]' (it installs onnx, onnx-ir, onnxscript and onnxruntime)"


def require(module: str):
    """Import ``module`` or raise an ImportError that names the ``onnx`` extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"tracejit's ONNX export and onnxruntime backend need the package '{module.split('.')[0]}' "
                          f"which is not installed: {_EXTRA_HINT}") from e
