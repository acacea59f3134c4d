"""A 2-d convolution whose constant weight is prepacked for oneDNN once, with ``+ residual`` and
relu fused into the same call.

torch's ``conv2d`` hands a dense weight to oneDNN, which reorders it into its blocked layout on
every call; a ResNet block then runs ``add_`` and ``relu`` as two more passes over the output.
``OneDnnConv`` reorders the weight once (``mkldnn_reorder_conv2d_weight``) and calls
``torch.ops.mkldnn._convolution_pointwise`` (the op torch's own CPU compiler emits for frozen
convolutions), which applies the residual add and relu while the output is still in cache:
ResNet-50 runs in 0.6x the time of eager here, against 0.84x with torch's conv2d.

The answer does not depend on the path: a call that does not fit (not a plain CPU float32 4-d
tensor, tracked by autograd, a residual of another shape or dtype, an error in oneDNN) runs
torch's ``conv2d`` / ``add_`` / ``relu``, the ops the trace recorded. The output is channels-last,
as torch's conv2d gives with a channels-last weight (passes/conv_layout.py, which must have
found the graph layout-free before passes/conv_kernels.py uses this kernel), or with ``contiguous``
(no residual) NCHW, as torch's conv2d gives for an NCHW input.

Example:
    >>> import torch
    >>> from tracejit.kernels.onednn_conv import OneDnnConv
    >>> w, b = torch.randn(8, 3, 3, 3), torch.randn(8)
    >>> conv = OneDnnConv(w, b, (1, 1), (1, 1), (1, 1), 1, residual=False, activation="relu")
    >>> x = torch.randn(2, 3, 10, 10)
    >>> torch.allclose(conv(x), torch.relu(torch.conv2d(x, w, b, 1, 1)), atol=1e-5)
    True
"""
from __future__ import annotations

import torch

from .onednn_activation import ACTIVATIONS, NAN_TO_NUMBER, label, recorded
from .weights_kernel import WeightsKernel

_F32 = torch.float32
_STRIDED = torch.strided


def available() -> bool:
    """Does this torch build have oneDNN's fused convolution op?"""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_convolution_pointwise")


def int_pair(v) -> list[int]:
    return [int(v), int(v)] if isinstance(v, int) else [int(x) for x in v]


class OneDnnConv(WeightsKernel):
    """``activation(conv2d(x, weight, bias, ...) [+ residual], *scalars)``, called as ``conv(x)`` or
    ``conv(x, residual)``; ``activation`` is a key of kernels/onednn_activation.py's ``ACTIVATIONS``
    (with a residual: "none" or "relu")."""

    def __init__(self, weight, bias, stride, padding, dilation, groups: int, *, residual: bool,
                 activation: str = "none", scalars: tuple = (), example_shape=None, inplace_add: bool = True,
                 contiguous: bool = False):
        self._hold(weight, bias)
        self.stride, self.padding, self.dilation = int_pair(stride), int_pair(padding), int_pair(dilation)
        self.groups = int(groups)
        self.residual, self.activation, self.scalars = residual, activation, tuple(scalars)
        self.inplace_add = inplace_add   # the recorded add: c.add_(r), or c + r (which may broadcast c)
        if residual and activation not in ("none", "relu"):
            raise ValueError(f"OneDnnConv: a residual add takes activation 'none' or 'relu'; got {activation!r}")
        self.example_shape = example_shape
        self.contiguous = contiguous   # the result as torch's conv2d gives it (NCHW), for graphs that read strides
        self._unary, self._algorithm, _ = ACTIVATIONS[activation]
        self.drops_nan = activation in NAN_TO_NUMBER   # see backends/fallback.py's finite-input check
        self._packed = self._pack()
        if self._packed is not None:
            kh, kw = weight.shape[2:]
            (ph, pw), (sh, sw), (dh, dw) = self.padding, self.stride, self.dilation
            # output size per spatial axis: (size + add) // stride + 1
            self._geometry = (ph * 2 - dh * (kh - 1) - 1, sh, pw * 2 - dw * (kw - 1) - 1, sw)

    def describe(self) -> str:
        return "conv2d" + ("+add" if self.residual else "") + label(self.activation)

    def moved(self, fn) -> "OneDnnConv":
        """The same kernel over ``fn`` applied to its constants (a ``Module._apply`` conversion)."""
        return OneDnnConv(fn(self.weight), None if self.bias is None else fn(self.bias), self.stride,
                          self.padding, self.dilation, self.groups, residual=self.residual,
                          activation=self.activation, scalars=self.scalars, example_shape=self.example_shape,
                          inplace_add=self.inplace_add, contiguous=self.contiguous)

    def _pack(self):
        """The weight in oneDNN's layout, or None when the constants do not fit the fused op."""
        return reorder_conv_weight(self)

    def __call__(self, x, residual=None):
        packed = self._packed
        if packed is not None and plain_f32(x) and x.dim() == 4 and not (x.requires_grad and torch.is_grad_enabled()):
            try:
                if not self.residual:
                    y = torch.ops.mkldnn._convolution_pointwise(
                        x, packed, self.bias, self.padding, self.stride, self.dilation, self.groups,
                        self._unary, list(self.scalars), self._algorithm)
                    return y.contiguous() if self.contiguous else y
                if plain_f32(residual) and not (residual.requires_grad and torch.is_grad_enabled()) \
                        and residual.shape == self._output_shape(x):
                    return torch.ops.mkldnn._convolution_pointwise.binary(
                        x, residual, packed, self.bias, self.padding, self.stride, self.dilation, self.groups,
                        "add", 1.0, None if self.activation == "none" else self._unary, [], "")
            except RuntimeError:   # e.g. an empty batch: torch's ops give their answer or error
                pass
        return self._fallback(x, residual)

    def _output_shape(self, x) -> tuple:
        n, _, h, w = x.shape
        add_h, sh, add_w, sw = self._geometry
        return (n, self.weight.shape[0], (h + add_h) // sh + 1, (w + add_w) // sw + 1)

    def _fallback(self, x, residual):
        """The ops the trace recorded."""
        y = torch.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        if self.residual:
            y = y.add_(residual) if self.inplace_add else torch.add(y, residual)
        return recorded(self.activation, y, self.scalars)

    def __repr__(self) -> str:
        return f"<OneDnnConv {self.describe()} {tuple(self.weight.shape)}>"


def reorder_conv_weight(kernel):
    """``kernel``'s weight (with its ``constants``, ``padding``, ``stride``, ``dilation``, ``groups`` and
    ``example_shape``) reordered into oneDNN's blocked layout once, or None when the constants do not fit."""
    if not (available() and packable(kernel.weight, 4, kernel.constants)):
        return None
    shape = list(kernel.example_shape or ())
    if len(shape) != 4 or not all(isinstance(s, int) and s > 0 for s in shape):
        shape = [1, kernel.weight.shape[1] * kernel.groups, 32, 32]   # a layout hint only: any size runs
    try:
        return torch._C._nn.mkldnn_reorder_conv2d_weight(kernel.weight.detach().to_mkldnn(), kernel.padding,
                                                         kernel.stride, kernel.dilation, kernel.groups, shape)
    except RuntimeError:
        return None


def packable(weight, dim: int, constants) -> bool:
    """Can oneDNN own a reordered copy of ``weight``: a ``dim``-d weight and plain float32 constants,
    none tracked by autograd (the fused ops have no backward)."""
    return weight.dim() == dim and all(plain_f32(k) and not k.requires_grad for k in constants)


def plain_f32(t) -> bool:
    """A plain CPU float32 strided tensor (not a subclass, not meta / CUDA / sparse / mkldnn)."""
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.dtype is _F32 and t.is_cpu and t.layout is _STRIDED
