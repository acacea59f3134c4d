"""Export a traced program: ONNX (``export_onnx``), built on onnxscript's ATen-to-ONNX library.

The ONNX stack is imported only when an export runs: ``pip install 'tracejit[onnx]'``.
"""
from .errors import ExportError


def export_onnx(traced, f=None, opset=None, **kwargs):
    from .onnx_export import export_onnx as _export   # imports onnxscript (the onnx extra): only when an export runs
    return _export(traced, f, opset, **kwargs)


export_onnx.__doc__ = """Write a traced program as an ONNX model; see tracejit.export.onnx_export.export_onnx."""

__all__ = ["export_onnx", "ExportError"]
