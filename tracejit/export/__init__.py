"""Export a traced program: ONNX (``export_onnx``), built on onnxscript's ATen-to-ONNX library.

The ONNX stack is imported only when an export runs: ``pip install 'tracejit[onnx]'``.
"""
from ..lazy_module import LazyModule
from .errors import ExportError

_onnx_export = LazyModule(".onnx_export", __package__)   # imports onnxscript (the onnx extra): when an export runs


def export_onnx(traced, f=None, opset=None, **kwargs):
    return _onnx_export.export_onnx(traced, f, opset, **kwargs)


export_onnx.__doc__ = """Write a traced program as an ONNX model; see tracejit.export.onnx_export.export_onnx."""

__all__ = ["export_onnx", "ExportError"]
