"""What every kernel over frozen weights shares (kernels/onednn_conv.py, onednn_linear.py, cudnn_conv.py,
cuda_linear.py): the object is its own callable, lists the tensors it holds in ``constants``, and ``moved(fn)``
builds it again over ``fn`` of them, the protocol runtime/constants.py moves a lowered program's kernels by
(``.kernel.moved(fn).function``) when a ``Module._apply`` conversion (``.to``, ``.half()``) reaches them."""
from __future__ import annotations


class WeightsKernel:
    """Base of a kernel over a weight and an optional bias (``constants``: the weight, then the bias if any)."""

    def _hold(self, weight, bias) -> None:
        self.weight, self.bias = weight, bias
        self.constants = [weight] + ([bias] if bias is not None else [])

    @property
    def kernel(self):
        return self

    @property
    def function(self):
        return self
