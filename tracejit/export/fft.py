"""ONNX for ``torch.fft.fftn`` of a real tensor whose complex result is read only through ``.real`` / ``.imag``
(transformers' FNet: ``torch.fft.fftn(hidden_states, dim=(1, 2)).real``), which torch_lib does not convert.

An ONNX tensor holds no complex numbers: ``DFT`` computes on a trailing axis of (real, imaginary) pairs. So the
input gets a trailing axis of 1 (real), each transformed dimension one ``DFT`` (``axis`` that dimension), and the
complex result stays pairs, which only ``aten::real`` / ``aten::imag`` read (index 0 / 1 of the last axis, cast
back to the traced dtype). The DFTs compute in float64: onnxruntime's float32 DFT was 7-35x further from the float64
answer than eager's FFT (FNet's 24 x 64: 8.9e-4 against 2.5e-5); in float64 the answer is the float32 rounding of
the exact one. Any other
reader of the complex result, an ``s`` (padded / cropped lengths) or a ``norm`` other than "backward" is refused by
name (default-deny).
"""
from __future__ import annotations

import numpy as np

from ._deps import require
from .special_ops import HANDLERS
from .torch_lib_lookup import lookup

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

def fft_fftn(cx, node, args, kwargs):
    """``fftn(x, s=None, dim, norm)`` of a real ``x``: (real, imaginary) pairs on a new last axis."""
    x = node.args[0]
    _, s, dim, norm = (list(args) + [None] * 4)[:4]
    dim = kwargs.get("dim", dim)
    if x.type.dtype.is_complex or not x.type.dtype.is_floating_point:
        raise NotImplementedError(f"fftn of a {x.type.dtype} tensor (only a real floating one)")
    if s is not None or kwargs.get("s") is not None or (kwargs.get("norm", norm) not in (None, "backward")):
        raise NotImplementedError("fftn with s or a norm other than 'backward'")
    out = node.outputs[0]
    readers = [n for n in cx.nodes if any(v is out for v in n.input_values())]
    others = sorted({n.op for n in readers if HANDLERS.get(n.op) is not pair_part})
    if not readers or others:
        raise NotImplementedError(f"fftn whose complex result is read other than by .real / .imag: {others}")
    rank = len(x.type.shape)
    dims = range(rank) if dim is None else [int(d) % rank for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    value = op.Unsqueeze(op.Cast(args[0], to=ir.DataType.DOUBLE), op.Constant(value_ints=[-1]))
    for d in dims:
        value = op.DFT(value, axis=d)
    cx.pairs.add(id(out))
    return [value]


def pair_part(cx, node, args, kwargs):
    """``.real`` / ``.imag`` of an fftn result (pairs: ``fft_fftn``); of anything else, torch_lib's conversion."""
    if id(node.args[0]) not in cx.pairs:
        if node.op == "aten::real.default" and not node.args[0].type.dtype.is_complex:
            return [args[0]]   # torch.real of a real tensor is the tensor
        if lookup(node.op) is None:
            raise NotImplementedError(f"{node.op} of a tensor that is not an fftn result")
        return cx.call_aten(node.op, args, kwargs)
    index = 0 if node.op == "aten::real.default" else 1
    return [op.Gather(args[0], op.Constant(value=ir.tensor(np.array(index, dtype=np.int64))), axis=-1)]


HANDLERS["aten::fft_fftn.default"] = fft_fftn
HANDLERS["aten::real.default"] = pair_part   # the readers of the pairs (fft_fftn checks them by this handler)
HANDLERS["aten::imag.default"] = pair_part
