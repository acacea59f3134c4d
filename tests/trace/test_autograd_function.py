"""A custom torch.autograd.Function is recorded as the ops of its forward, with a warning.

Decision (issue 3): the program stays savable as data; the ledger and a TracerWarning say that
gradients of the traced program come from those ops' own derivatives, not the Function's backward.
"""
import io
import warnings

import torch

import tracejit


class ScaledSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 100.0   # deliberately not 2x: the traced program cannot know this


def uses_function(x):
    return ScaledSquare.apply(x) + 1  # @apply_line


def _line_of(marker):
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if marker in line and "_line_of" not in line:
                return i
    raise AssertionError(marker)


def test_function_is_traced_as_its_forward_ops_with_a_warning_and_ledger_entry():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = tracejit.trace(uses_function, torch.randn(4))
    tw = [w for w in caught if issubclass(w.category, tracejit.TracerWarning) and "ScaledSquare" in str(w.message)]
    assert tw and tw[0].filename == __file__ and tw[0].lineno == _line_of("@apply_line")
    assert "backward" in str(tw[0].message)
    entries = [e for e in traced.ledger if e.kind == "autograd_function"]
    assert entries and entries[0].lineno == _line_of("@apply_line") and entries[0].value == "ScaledSquare"
    x = torch.randn(7)
    torch.testing.assert_close(traced(x), uses_function(x))
    assert "aten::mul" in str(traced.graph)


def test_gradients_follow_the_recorded_ops_not_the_custom_backward():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(uses_function, torch.randn(4))
    x = torch.randn(5, requires_grad=True)
    traced(x).sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())          # d(x*x)/dx from aten::mul
    eager_x = x.detach().clone().requires_grad_()
    uses_function(eager_x).sum().backward()
    assert not torch.allclose(eager_x.grad, x.grad)              # eager used the custom backward


def test_function_state_is_restored_and_saved_program_keeps_the_entry():
    original = torch.autograd.Function.__dict__["apply"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(uses_function, torch.randn(3))
    assert torch.autograd.Function.__dict__["apply"] is original
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    assert [e.kind for e in loaded.ledger] == [e.kind for e in traced.ledger]
    x = torch.randn(6)
    torch.testing.assert_close(loaded(x), uses_function(x))
