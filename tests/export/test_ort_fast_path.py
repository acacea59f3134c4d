"""The onnxruntime backend's per-call closures (one tensor, or flat tuples of tensors, in and out):
eager's answers on new shapes, the output structure, fresh outputs per call, and the same errors
as the general path."""
from __future__ import annotations

import pytest
import torch

import tracejit

from backend_check import closure

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def backend(fn, *example):
    with torch.no_grad():
        return tracejit.optimize_for_inference(tracejit.trace(fn, example), backend="onnxruntime")


def two_in_two_out(x, y):
    return torch.tanh(x) * y, x - y.sum(-1, keepdim=True)


def two_in_list_out(x, y):
    return [x + y, x * y, torch.sigmoid(x)]


def test_single_tensor_closure_gives_eager_answers_on_new_shapes():
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).eval()
    program = backend(model, torch.randn(2, 5))
    assert closure(program).__name__ == "call_one"
    for batch in (1, 4, 9):
        x = torch.randn(batch, 5)
        with torch.no_grad():
            torch.testing.assert_close(program(x), model(x), rtol=1e-4, atol=1e-5)


def test_flat_tuple_closure_keeps_tuple_and_list_outputs():
    program = backend(two_in_two_out, torch.randn(2, 3), torch.randn(2, 3))
    assert closure(program).__name__ == "call_flat"
    x, y = torch.randn(6, 4), torch.randn(6, 4)
    got = program(x, y)
    assert type(got) is tuple and len(got) == 2
    for g, w in zip(got, two_in_two_out(x, y)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    listed = backend(two_in_list_out, torch.randn(3), torch.randn(3))
    x, y = torch.randn(8), torch.randn(8)
    got = listed(x, y)
    assert type(got) is list and len(got) == 3
    for g, w in zip(got, two_in_list_out(x, y)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_each_call_returns_fresh_tensors():
    program = backend(two_in_two_out, torch.randn(2, 3), torch.randn(2, 3))
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    first = program(x, y)
    kept = [t.clone() for t in first]
    program(torch.randn(2, 3), torch.randn(2, 3))
    for t, k in zip(first, kept):
        torch.testing.assert_close(t, k, rtol=0, atol=0)
    first[0].add_(1.0)   # writable, and writing to it does not touch the next call's answer
    torch.testing.assert_close(program(x, y)[0], two_in_two_out(x, y)[0], rtol=1e-4, atol=1e-5)


def test_inputs_are_read_as_they_are_at_call_time():
    program = backend(lambda x: x * 2, torch.randn(4))
    x = torch.randn(4)
    torch.testing.assert_close(program(x), x * 2)
    x.add_(10.0)    # the numpy view sees the tensor's current memory
    torch.testing.assert_close(program(x), x * 2)


def test_grad_requiring_and_strided_inputs_on_the_flat_path():
    program = backend(two_in_two_out, torch.randn(2, 3), torch.randn(2, 3))
    x = torch.randn(3, 5).t().requires_grad_(True)
    y = torch.randn(5, 3)
    with torch.no_grad():
        want = two_in_two_out(x, y)
    for g, w in zip(program(x, y), want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_fast_paths_give_the_general_paths_errors():
    one = backend(torch.nn.Linear(4, 2).eval(), torch.randn(1, 4))
    with pytest.raises(TypeError, match=r"should be a Tensor; got list"):
        one([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(TypeError, match="keyword arguments"):
        one(torch.randn(1, 4), scale=2)
    with pytest.raises(TypeError, match="another structure"):
        one(torch.randn(1, 4), torch.randn(1, 4))
    with pytest.raises(RuntimeError, match="mat1 and mat2 must have the same dtype"):   # another dtype: the
        one(torch.randn(1, 4, dtype=torch.float64))   # traced program's call, eager's error (test_backend_other_dtypes)
    flat = backend(two_in_two_out, torch.randn(2, 3), torch.randn(2, 3))
    with pytest.raises(TypeError, match=r"argument 'y' should be a Tensor; got int"):
        flat(torch.randn(2, 3), 3)
    with pytest.raises(RuntimeError, match="must match the size"):   # eager's own error, from the traced program
        flat(torch.randn(2, 3), torch.randn(4, 5))
