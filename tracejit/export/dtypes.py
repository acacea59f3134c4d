"""torch dtypes <-> ONNX (onnx-ir) data types."""
from __future__ import annotations

import torch

from ._deps import require

ir = require("onnx_ir")

TORCH_TO_ONNX = {
    torch.float32: ir.DataType.FLOAT, torch.float64: ir.DataType.DOUBLE, torch.float16: ir.DataType.FLOAT16,
    torch.bfloat16: ir.DataType.BFLOAT16, torch.int64: ir.DataType.INT64, torch.int32: ir.DataType.INT32,
    torch.int16: ir.DataType.INT16, torch.int8: ir.DataType.INT8, torch.uint8: ir.DataType.UINT8,
    torch.bool: ir.DataType.BOOL, torch.complex64: ir.DataType.COMPLEX64, torch.complex128: ir.DataType.COMPLEX128,
}
ONNX_TO_TORCH = {v: k for k, v in TORCH_TO_ONNX.items()}
SCALAR_TO_ONNX = {"int": ir.DataType.INT64, "float": ir.DataType.DOUBLE, "bool": ir.DataType.BOOL}


def onnx_dtype(dtype: torch.dtype):
    try:
        return TORCH_TO_ONNX[dtype]
    except KeyError:
        raise TypeError(f"ONNX has no data type for {dtype}") from None
