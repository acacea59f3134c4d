"""A model with a custom ``torch.autograd.Function`` (transformers' BLOOM: its GeLU is one) exports to ONNX: the
Function's forward ops are recorded before its ``tracejit::autograd_function`` node, and an ONNX model, which has
no backward, takes them as the node's outputs. The export failed with "no ONNX conversion for tracejit op
'tracejit::autograd_function'"; found by bench/serve_corpus19.py."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from backend_check import assert_backends_match

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class TanhGelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return grad * torch.sigmoid(1.702 * x)


class SplitScale(torch.autograd.Function):
    """Two outputs."""

    @staticmethod
    def forward(ctx, x, scale: float):
        return x * scale, x.flip(-1)

    @staticmethod
    def backward(ctx, a, b):
        return a + b.flip(-1), None


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        h = TanhGelu.apply(self.lin(x))
        a, b = SplitScale.apply(h, 2.0)
        return a * 3 - b


def test_custom_autograd_functions_export_with_their_forward():
    gen = torch.Generator().manual_seed(1)
    assert_backends_match(Block().eval(), (torch.randn(1, 4, 6, generator=gen),),
                          [(torch.randn(3, 7, 6, generator=gen),)], "autograd Function", rtol=1e-5, atol=1e-5)


class WithCount(torch.autograd.Function):
    """A number among the outputs (``unpack`` with a hole: torch.jit.trace cannot run it, so no reference here)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2, 3, x.flip(-1)

    @staticmethod
    def backward(ctx, a, _, b):
        return 2 * a + b.flip(-1)


def test_a_function_with_a_number_among_its_outputs_exports():
    import tracejit

    def f(x):
        a, n, b = WithCount.apply(x)
        return a * n - b

    traced = tracejit.trace(f, (torch.randn(2, 5),))
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    x = torch.randn(4, 7)
    torch.testing.assert_close(program(x), f(x))
