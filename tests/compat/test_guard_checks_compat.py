"""Issue #20's later guard checks side by side with torch.jit.trace (docs/COMPAT.md `boundary-guards`).

- Size guards ONNX cannot check: torch.jit.trace's program keeps the trace's branch for every size;
  tracejit's onnxruntime program checks them on the call's sizes (eager's answer or GuardError naming the line).
- Metadata of an input the retrace must see (a storage offset, the lazy conjugate bit): torch.jit.trace's
  program keeps the trace's branch; tracejit's retrace runs on copies that keep it and answers as eager.
The numpy guards (np.arange(n), np.sqrt(d), ...) run through the harness as cases `boundary_numpy_*`.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch

import tracejit
from tracejit.runtime import specialize


def log_scaled(x):
    return x * math.log2(x.size(0) + 1)  # @log_scaled


def longer_than_two(x):
    return x * 2 if x.size(0) > 2 else x - 1  # @longer_than_two


def offset_scale(x):
    return x * (x.storage_offset() + 1)


def conj_branch(x):
    return x * 2 if x.is_conj() else x + 1


def jit_trace(fn, *example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(fn, example, check_trace=False)


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@pytest.mark.parametrize("fn,new", [(log_scaled, 5), (longer_than_two, 2)], ids=["log2_of_size_math", "comparison"])
def test_onnxruntime_program_checks_what_torch_jit_trace_freezes(fn, new):
    pytest.importorskip("onnxruntime")
    x = torch.randn(new, 2)
    reference = jit_trace(fn, torch.randn(3, 2))
    assert not torch.allclose(reference(x), fn(x))   # torch's program: the trace's branch, silently
    traced = quiet(tracejit.trace, fn, (torch.randn(3, 2),), check_trace=False)
    program = quiet(tracejit.optimize_for_inference, traced, backend="onnxruntime")
    torch.testing.assert_close(quiet(program, x), fn(x))   # the traced program answers: it traces again
    dropped = quiet(tracejit.trace, fn, (torch.randn(3, 2),), check_trace=False)
    specialize.drop_original(dropped)   # as a loaded program: the GuardError naming the line
    program = quiet(tracejit.optimize_for_inference, dropped, backend="onnxruntime")
    with pytest.raises(tracejit.GuardError) as info:
        program(x)
    assert info.value.source.lineno == fn.__code__.co_firstlineno + 1
    y = torch.randn(3, 2)
    torch.testing.assert_close(program(y), fn(y))


@pytest.mark.parametrize("fn,example,new", [
    (offset_scale, lambda: torch.randn(2, 3), lambda: torch.randn(3, 3)[1:]),
    (conj_branch, lambda: torch.randn(3, dtype=torch.complex64),
     lambda: torch.randn(3, dtype=torch.complex64).conj()),
], ids=["storage_offset", "conj_bit"])
def test_retrace_sees_the_input_metadata_torch_jit_trace_freezes(fn, example, new):
    x = new()
    reference = jit_trace(fn, example())
    assert not torch.allclose(reference(x), fn(x))
    traced = quiet(tracejit.trace, fn, (example(),), check_trace=False)
    torch.testing.assert_close(quiet(traced, x), fn(x))
    assert len(traced.specializations) == 2


def test_submodule_switched_after_tracing_torch_jit_trace_keeps_its_mode():
    """model.eval(); model.drop.train(); trace; then drop.eval(): torch's program still drops (its graph holds
    dropout's train flag); tracejit's retraces and answers as eager (trace/module_flags.py)."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.drop = torch.nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.lin(x))
    torch.manual_seed(0)
    net = Net().eval()
    net.drop.train()
    x = torch.randn(16, 8)
    reference = jit_trace(net, x)
    traced = quiet(tracejit.trace, net, (x,))
    for m in (net.drop, reference.drop, traced.drop):
        m.eval()
    want = net(x)
    assert not torch.allclose(reference(x), want)
    torch.testing.assert_close(quiet(traced, x), want)


def test_shared_memory_branch_torch_jit_trace_freezes_tracejit_refuses():
    """x.is_shared() (torch's Python helper reading a storage handle): torch's program keeps the trace's
    branch for a DataLoader worker's shared-memory batch; tracejit refuses at the line (boundary.py)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "guards"))
    from boundary_patterns import shared_memory_branch
    from tracejit.trace.boundary import BoundaryError
    shared = torch.randn(3).share_memory_()
    reference = jit_trace(shared_memory_branch, torch.randn(3))
    assert not torch.allclose(reference(shared), shared_memory_branch(shared))
    with pytest.raises(BoundaryError, match="is_shared"):
        quiet(tracejit.trace, shared_memory_branch, (torch.randn(3),), check_trace=False)
