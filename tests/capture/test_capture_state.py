"""The capture patches (torch.finfo, grad-mode context managers, TorchScript entry points) are removed
after every trace, also when tracing fails."""
import pytest
import torch
from torch.autograd import grad_mode

import tracejit

ORIGINAL_FINFO = torch.finfo
GRAD_METHODS = {(cls, name): cls.__dict__[name]
                for cls in (grad_mode.no_grad, grad_mode.enable_grad, grad_mode.set_grad_enabled,
                            grad_mode.inference_mode)
                for name in ("__enter__", "__exit__")}
SET_INIT = grad_mode.set_grad_enabled.__dict__["__init__"]
AUTOCAST = {name: torch.amp.autocast_mode.autocast.__dict__[name] for name in ("__enter__", "__exit__")}
SCRIPT_CALL = {}   # ScriptFunction.__call__ as each test starts: torch.testing's common_utils, which another
# test module imports on first use, replaces it for the rest of the process (torch's own patch, not ours)


@pytest.fixture(autouse=True)
def _script_call_before_the_test():
    SCRIPT_CALL["before"] = torch._C.ScriptFunction.__dict__["__call__"]


def assert_restored():
    assert torch.finfo is ORIGINAL_FINFO
    assert all(cls.__dict__[name] is fn for (cls, name), fn in GRAD_METHODS.items())
    assert grad_mode.set_grad_enabled.__dict__["__init__"] is SET_INIT
    assert all(torch.amp.autocast_mode.autocast.__dict__[name] is fn for name, fn in AUTOCAST.items())
    assert torch._C.ScriptFunction.__dict__["__call__"] is SCRIPT_CALL["before"]
    assert "forward" not in torch.jit.RecursiveScriptModule.__dict__
    assert "__getattribute__" not in torch.jit.RecursiveScriptModule.__dict__
    assert torch.is_grad_enabled()


def uses_everything(x):
    with torch.no_grad():
        m = torch.finfo(x.dtype).min
    return x.clamp(min=m) * torch.ones(1, dtype=x.dtype)


def fails_inside_no_grad(x):
    with torch.no_grad():
        torch.set_grad_enabled(False)
        raise ValueError("boom")


def test_patches_are_removed_after_a_trace():
    tracejit.trace(uses_everything, (torch.randn(3),))
    assert_restored()
    assert torch.finfo(torch.float16).max == 65504.0       # torch's own finfo outside traces


def test_patches_are_removed_when_the_traced_code_raises():
    with pytest.raises(ValueError, match="boom"):
        tracejit.trace(fails_inside_no_grad, (torch.randn(3),))
    assert_restored()


def test_grad_mode_blocks_outside_a_trace_are_untouched():
    tracejit.trace(uses_everything, (torch.randn(3),))
    with torch.no_grad():
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled()


def test_two_threads_trace_capture_patterns_at_once():
    import threading
    barrier = threading.Barrier(2)
    results, errors = {}, []

    def region_and_dtype(x):
        barrier.wait(timeout=120)     # both threads are inside their traces here
        with torch.no_grad():
            scale = x.abs().amax()
        return x.clamp(min=torch.finfo(x.dtype).min) * scale + torch.ones(1, dtype=x.dtype)

    def work(name):
        try:
            results[name] = tracejit.trace(region_and_dtype, (torch.randn(3),), check_trace=False)
        except Exception as e:   # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    for traced in results.values():
        out = traced(x)
        assert out.dtype == torch.float64 and "with torch.no_grad():" in traced.code
        (grad,) = torch.autograd.grad(out.sum(), x)
        torch.testing.assert_close(grad, x.detach().abs().amax().expand(4))   # scale is a constant for autograd
    assert_restored()
