"""A conv net's feature maps kept in oneDNN's blocked layout (``nChw16c``, an opaque ``torch._mkldnn`` tensor)
from one convolution to the next: the kernels of passes/blocked_convs.py.

torch's ``conv2d`` on an NCHW tensor hands oneDNN a plain layout; oneDNN reorders input and weight into its
blocked layout, convolves there and reorders the result back, on every call. A region of convs, relus, adds and
max pools can stay blocked instead: ``ToBlocked`` converts its entries once, ``BlockedConv`` convolves with
the weight reordered once (``mkldnn_reorder_conv2d_weight``), ``BlockedAdd`` adds, and ``ToDense`` converts
what leaves the region. torch.jit's ``optimize_for_inference`` does the same (its MKLDNN conversion).

Exactness: oneDNN convolves in the blocked layout either way, so a blocked conv gives torch's conv2d bits
(tests/passes/test_blocked_convs.py checks it, dilated convs included). Only a conv torch would run without
oneDNN (a 1x1 conv at one thread) changes its sum order, as torch.jit's conversion does.

A call that does not fit runs torch's ops on plain tensors: ``ToBlocked`` leaves a tensor it cannot convert
(not a plain CPU float32 4-d tensor, or tracked by autograd) as it is, and every kernel here takes either
layout, so the region then runs the recorded ops.

Example:
    >>> import torch
    >>> from tracejit.kernels.onednn_blocked import BlockedConv, ToBlocked, ToDense
    >>> w, b = torch.randn(8, 3, 3, 3), torch.randn(8)
    >>> conv = BlockedConv(w, b, (1, 1), (1, 1), (1, 1), 1)
    >>> x = torch.randn(2, 3, 10, 10)
    >>> torch.equal(ToDense()(conv(ToBlocked()(x))), torch.conv2d(x, w, b, 1, 1))
    True
"""
from __future__ import annotations

import torch

from ..ops import exact_overload
from .onednn_conv import int_pair, plain_f32, reorder_conv_weight
from .weights_kernel import WeightsKernel


def _tracked(t) -> bool:
    return t.requires_grad and torch.is_grad_enabled()


class ToBlocked:
    """A region's entry: ``x`` in oneDNN's blocked layout, or ``x`` itself where it does not fit."""

    def __call__(self, x):
        if plain_f32(x) and x.dim() == 4 and not _tracked(x) and x.numel() > 0:
            return x.to_mkldnn()
        return x

    def __repr__(self) -> str:
        return "<ToBlocked>"


class ToDense:
    """A region's exit: a blocked tensor as a plain (NCHW, contiguous) one; a plain tensor as it is."""

    def __call__(self, x):
        return x.to_dense() if x.is_mkldnn else x

    def __repr__(self) -> str:
        return "<ToDense>"


class BlockedAdd:
    """``a + b`` or ``a.add_(b)`` (``inplace``) in either layout; where one operand is blocked and the other is
    not (a region entry left plain), the plain one is converted to the other's layout."""

    def __init__(self, inplace: bool):
        self.inplace = inplace

    def __call__(self, a, b):
        if a.is_mkldnn != b.is_mkldnn:
            b = b.to_mkldnn() if a.is_mkldnn else b.to_dense()
        return a.add_(b) if self.inplace else torch.add(a, b)

    def __repr__(self) -> str:
        return f"<BlockedAdd {'add_' if self.inplace else 'add'}>"


class BlockedOp:
    """An ATen op oneDNN runs on blocked tensors as on plain ones (relu, max pool, eval dropout: the region's
    ``BLOCKED`` ops), called on a region value with the recorded arguments after it."""

    def __init__(self, op: str, extra: tuple):
        self.op, self.extra = op, tuple(extra)
        self._fn = exact_overload(op)
        if self._fn is None:
            raise ValueError(f"BlockedOp: torch has no op {op!r}")

    def __call__(self, x):
        return self._fn(x, *self.extra)

    def __repr__(self) -> str:
        return f"<BlockedOp {self.op}>"


class BlockedConv(WeightsKernel):
    """``conv2d(x, weight, bias, stride, padding, dilation, groups)``: a blocked result for a blocked ``x``,
    torch's conv2d (a plain result) for a plain one."""

    def __init__(self, weight, bias, stride, padding, dilation, groups: int, example_shape=None):
        self._hold(weight, bias)
        self.stride, self.padding, self.dilation = int_pair(stride), int_pair(padding), int_pair(dilation)
        self.groups = int(groups)
        self.example_shape = example_shape
        self._packed = self._pack()

    def describe(self) -> str:
        return "conv2d"

    def moved(self, fn) -> "BlockedConv":
        """The same kernel over ``fn`` applied to its constants (a ``Module._apply`` conversion)."""
        return BlockedConv(fn(self.weight), None if self.bias is None else fn(self.bias), self.stride, self.padding,
                           self.dilation, self.groups, self.example_shape)

    def _pack(self):
        return reorder_conv_weight(self)

    def __call__(self, x):
        if x.is_mkldnn:
            if self._packed is not None:
                try:
                    return torch.mkldnn_convolution(x, self._packed, self.bias, self.padding, self.stride,
                                                    self.dilation, self.groups)
                except RuntimeError:   # e.g. a wrong channel count: torch's conv2d gives its error
                    pass
            x = x.to_dense()
        return torch.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def __repr__(self) -> str:
        return f"<BlockedConv {tuple(self.weight.shape)}>"
