"""optimize_for_inference and tensors the trace captured that are not parameters or buffers (a
global, a plain tensor attribute): they stay the caller's, and passes copy some of them (weight
layouts, folded biases, prepacked oneDNN weights). A change in place after optimizing must give
eager's answer, as the plain trace and torch.jit's trace do, never the stale copy's."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracejit

from region_testlib import jit, ofi

torch.manual_seed(0)
W1, B1, W2, B2 = torch.randn(32, 16), torch.randn(32), torch.randn(8, 32), torch.randn(8)   # a small chain
BIG_W, BIG_B = torch.randn(512, 256), torch.randn(512)                                      # oneDNN's linear
CONV_W = torch.randn(8, 3, 3, 3)                                                             # oneDNN's conv


def small_chain(x):
    return nn.functional.linear(torch.relu(nn.functional.linear(x, W1, B1)), W2, B2)


def big_linear(x):
    return nn.functional.gelu(nn.functional.linear(x, BIG_W, BIG_B)).sum(-1)


def conv_net(x):
    return torch.relu(torch.conv2d(x, CONV_W, None, 1, 1)).mean((2, 3))


class PlainAttribute(nn.Module):
    """A tensor attribute that is neither a parameter nor a buffer."""

    def __init__(self):
        super().__init__()
        self.w = torch.randn(8, 32)
        self.inner = nn.Linear(16, 32)

    def forward(self, x):
        return nn.functional.linear(torch.relu(self.inner(x)), self.w)


CASES = [
    ("small chain", small_chain, lambda: torch.randn(3, 16), lambda: (W2.mul_(2.0), B1.add_(0.5))),
    ("big linear", big_linear, lambda: torch.randn(4, 16, 256), lambda: BIG_W.mul_(-1.0)),
    ("conv", conv_net, lambda: torch.randn(2, 3, 12, 12), lambda: CONV_W.add_(1.0)),
]


@pytest.mark.parametrize("name,fn,make,change", CASES, ids=[c[0] for c in CASES])
def test_a_captured_tensor_changed_in_place_gives_eagers_answer(name, fn, make, change):
    example = make()
    program, plain, ref = ofi(fn, (example,)), tracejit.trace(fn, (example,)), jit(fn, (example,))
    with torch.no_grad():
        x = make()
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # nothing changed: the optimized path, no warning
            torch.testing.assert_close(program(x), fn(x), rtol=1e-4, atol=1e-4)
        before = program(x)
        change()
        want = fn(x)
        assert not torch.allclose(want, before, rtol=1e-3, atol=1e-3)   # the change moves the answer
        with pytest.warns(tracejit.TracerWarning, match=r"changed in place after the program was optimized.*"
                                                        r"running the unoptimized program") as caught:
            got = program(x)
        assert "test_captured_tensors.py" in str(caught[0].message)   # the line that read the tensor
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got, plain(x), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got, ref(x), rtol=1e-4, atol=1e-4)   # torch.jit's trace follows too
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # warned once
            torch.testing.assert_close(program(make()).shape, want.shape)


def test_a_plain_tensor_attribute_of_a_module_is_followed_and_parameters_are_a_snapshot():
    torch.manual_seed(1)
    model = PlainAttribute().eval()
    example = torch.randn(2, 16)
    program, ref = ofi(model, (example,)), jit(model, (example,))
    assert len(program.__dict__["_captured"]) == 1 and program.__dict__["_slow_call"]
    with torch.no_grad():
        x = torch.randn(5, 16)
        model.inner.bias.add_(1.0)   # a parameter: frozen, the program is a snapshot (docs/COMPAT.md)
        snapshot = program(x)
        model.inner.bias.sub_(1.0)
        torch.testing.assert_close(snapshot, model(x), rtol=1e-5, atol=1e-5)
        model.w.mul_(3.0)            # the plain attribute: followed, as eager and torch.jit's trace do
        with pytest.warns(tracejit.TracerWarning, match="changed in place"):
            got = program(x)
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got, ref(x), rtol=1e-5, atol=1e-5)


def test_programs_without_captured_tensors_keep_the_fast_call_and_a_moved_program_is_a_snapshot():
    torch.manual_seed(2)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    program = ofi(mlp, (torch.randn(1, 16),))
    assert program.__dict__["_captured"] == () and not program.__dict__["_slow_call"]
    model = PlainAttribute().eval()
    moved = ofi(model, (torch.randn(2, 16),))
    moved.double()
    assert moved.__dict__["_captured"] == () and not moved.__dict__["_slow_call"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        x = torch.randn(3, 16, dtype=torch.float64)
        want = model(x.float()).double()
        model.w.mul_(2.0)   # after a move the program holds its own copies, as a moved trace does
        torch.testing.assert_close(moved(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_onnx_backends_also_give_eagers_answer_after_a_captured_tensor_changes(backend):
    pytest.importorskip("onnxruntime" if backend == "onnxruntime" else "openvino")
    w = torch.randn(8, 16)

    def fn(x):
        return torch.tanh(nn.functional.linear(x, w))

    example = torch.randn(2, 16)
    with torch.no_grad():
        program = tracejit.optimize_for_inference(tracejit.trace(fn, (example,)), backend=backend)
        x = torch.randn(3, 16)
        torch.testing.assert_close(program(x), fn(x), rtol=1e-4, atol=1e-5)
        w.mul_(-1.0)
        with pytest.warns(tracejit.TracerWarning, match="changed in place"):
            got = program(x)
        torch.testing.assert_close(got, fn(x), rtol=1e-4, atol=1e-5)
    model = nn.Sequential(nn.Linear(16, 8), nn.Tanh()).eval()
    with torch.no_grad():
        plain = tracejit.optimize_for_inference(tracejit.trace(model, (example,)), backend=backend)
    assert plain._captured == ()   # parameters only: the direct call, no check
