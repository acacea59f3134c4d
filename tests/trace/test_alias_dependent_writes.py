"""Ops that return their input for some inputs and a copy for others, followed by in-place writes.

``x.contiguous()`` is x itself when x is contiguous and a copy when not; ``x.float()`` /
``torch.as_tensor(x, dtype=...)`` are x itself when nothing changes. After an in-place write
through one side, whether the other side sees it depends on which happened, so a trace made on
one kind of input must still give eager's answer on the other. The recorder hands such a result
back as a view of its input (trace/self_results.py), so the graph keeps the two apart and the
real op decides the aliasing at call time.

torch.jit's tracer merges the two into one value and answers for the traced layout: where a test
says ``jit_differs``, its answer differs from eager's (a deliberate difference, docs/COMPAT.md).
"""
from __future__ import annotations

import warnings

import pytest
import torch

import tracejit

GUARD = "tracejit::guard"


def contiguous_then_write(x):
    return x.contiguous().add_(1), x * 1


def write_input_read_contiguous(x):
    y = x.contiguous()
    x.add_(1)
    return y * 1


def write_view_of_contiguous(x):
    y = x.contiguous()
    y.view(-1).add_(1)
    return x * 1


def reshape_then_write(x):
    return x.reshape(-1).add_(1), x * 1


def float_then_write(x):
    return x.float().add_(1), x * 1


def as_tensor_then_write(x):
    return torch.as_tensor(x, dtype=torch.float32).add_(1), x * 1


def _contig():
    return torch.arange(16.0).reshape(4, 4)


def _transposed():
    return torch.arange(16.0).reshape(4, 4).t()


def _f32():
    return torch.arange(4.0)


def _f64():
    return torch.arange(4.0, dtype=torch.float64)


# (function, trace input, call input, does torch.jit's trace give a different answer from eager)
CASES = {
    "contiguous: traced contiguous, called transposed": (contiguous_then_write, _contig, _transposed, True),
    "contiguous: traced transposed, called contiguous": (contiguous_then_write, _transposed, _contig, False),
    "contiguous, write x: traced contiguous, called transposed": (write_input_read_contiguous, _contig, _transposed,
                                                                  True),
    "contiguous, write x: traced transposed, called contiguous": (write_input_read_contiguous, _transposed, _contig,
                                                                  False),
    "contiguous, write a view: traced contiguous, called transposed": (write_view_of_contiguous, _contig,
                                                                       _transposed, True),
    "contiguous, write a view: traced transposed, called contiguous": (write_view_of_contiguous, _transposed,
                                                                       _contig, False),
    "reshape: traced contiguous, called transposed": (reshape_then_write, _contig, _transposed, False),
    "reshape: traced transposed, called contiguous": (reshape_then_write, _transposed, _contig, False),
    "float: traced float32, called float64": (float_then_write, _f32, _f64, True),
    "float: traced float64, called float32": (float_then_write, _f64, _f32, False),
    "as_tensor: traced float32, called float64": (as_tensor_then_write, _f32, _f64, True),
    "as_tensor: traced float64, called float32": (as_tensor_then_write, _f64, _f32, False),
}


def _outputs(out):
    return out if isinstance(out, tuple) else (out,)


def _run(fn, make):
    x = make()
    out = _outputs(fn(x))
    return out, x   # x: the caller's tensor after the call (an in-place write may have reached it)


@pytest.mark.parametrize("case", list(CASES))
def test_eager_answer_on_the_other_layout(case):
    fn, traced_on, called_on, jit_differs = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(fn, (traced_on(),), check_trace=False)
        jitted = torch.jit.trace(fn, (traced_on(),), check_trace=False)
    eager_out, eager_x = _run(fn, called_on)
    traced_out, traced_x = _run(traced, called_on)
    jit_out, _ = _run(jitted, called_on)
    for e, t in zip(eager_out, traced_out):
        torch.testing.assert_close(t, e, rtol=0, atol=0)
    torch.testing.assert_close(traced_x, eager_x, rtol=0, atol=0)   # the caller's tensor written (or not) alike
    same = all(torch.equal(e, j) for e, j in zip(eager_out, jit_out))
    assert same != jit_differs, f"torch.jit's answer {'no longer ' if jit_differs else ''}differs from eager's"


@pytest.mark.parametrize("make", [_contig, _transposed])
def test_autograd_through_written_contiguous(make):
    def fn(x):
        y = (x * 1).contiguous()
        y.mul_(3)
        return (y * x).sum()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(fn, (_contig().requires_grad_(),), check_trace=False)
    grads = []
    for f in (fn, traced):
        x = make().detach().requires_grad_()
        f(x).backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[1], grads[0])


class _Reshapes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 8)

    def forward(self, x):
        x = x.contiguous().float()
        return self.lin(x.reshape(x.size(0), -1)).flatten().contiguous()


class _Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.lin(x.view(x.size(0), 16)).view(-1)


def _guards(traced) -> int:
    return sum(1 for n in traced.graph.nodes if n.op == GUARD)


def test_no_new_guards_without_writes():
    x = torch.randn(2, 4, 4)
    model = _Reshapes().eval()
    plain = tracejit.trace(_Plain().eval(), (x,))
    reshapes = tracejit.trace(model, (x,))
    assert _guards(reshapes) == _guards(plain)
    for arg in (x, x.transpose(1, 2)):
        torch.testing.assert_close(reshapes(arg), model(arg))


def test_no_guard_for_the_written_alias_either():
    """The fix keeps x and contiguous(x) apart in the graph: no guard, nothing checked per call."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(contiguous_then_write, (_contig(),), check_trace=False)
    assert _guards(traced) == 0
    assert "contiguous" in traced.code
