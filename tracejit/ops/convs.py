"""The convolution ops the inference passes rewrite (fold_conv_bn, conv_layout, conv_kernels)."""
from __future__ import annotations

# padding: an int list, or "same" / "valid"
CONV2D = tuple(f"aten::conv2d.{overload}" for overload in ("default", "padding"))
CONV_ND = tuple(f"aten::conv{d}d.{overload}" for d in (1, 2, 3) for overload in ("default", "padding"))
