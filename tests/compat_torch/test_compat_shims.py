"""tracejit.compat on the torch this suite runs with, and its torch < 2.13 fallback forced on any torch.

The fallback for ``torch.overrides.redispatch_function`` is the only path torch 2.11 / 2.12 have; it is
tested here beside torch's own (where present) so that a difference shows on the pinned CI torch too.
"""
from __future__ import annotations

import sys
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode, handle_torch_function, has_torch_function_unary

import tracejit
from tracejit import compat
from tracejit.runtime import private_rng
from tracejit.trace import recorder

NATIVE = getattr(torch.overrides, "redispatch_function", None)


class _CallLog(TorchFunctionMode):
    """Logs every function that reaches it and traces through Python helpers with ``redispatch``."""

    def __init__(self, redispatch):
        super().__init__()
        self.redispatch = redispatch
        self.names: list[str] = []
        self._inside: list = []

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.names.append(getattr(func, "__name__", repr(func)))
        if recorder._is_builtin(func) or func in self._inside:
            return func(*args, **kwargs)
        self._inside.append(func)
        try:
            with self:
                return self.redispatch(func, types_, args, kwargs)
        finally:
            self._inside.pop()


def _helpers(x):
    """Python helpers of torch (module functions, a Tensor dunder wrapped by a decorator, a Tensor method)."""
    y = F.interpolate(F.relu6(x), scale_factor=2, mode="bilinear", align_corners=False)
    y = 1 - F.layer_norm(y, y.shape[-1:])
    y = F.max_pool2d(y, 2) + F.adaptive_max_pool2d(y, 1)   # boolean_dispatch: the check is one call further in
    return F.gelu(y.unflatten(1, (2, -1))).sum(dim=(2, 3))


def _log(redispatch, x):
    mode = _CallLog(redispatch)
    with mode:
        out = _helpers(x)
    return mode.names, out


@pytest.mark.skipif(NATIVE is None, reason=f"torch {torch.__version__} has no redispatch_function to compare with")
def test_fallback_reaches_the_same_calls_as_torchs_own():
    x = torch.randn(2, 4, 3, 5)
    native_names, native_out = _log(NATIVE, x)
    copy_names, copy_out = _log(compat._redispatch_by_copy, x)
    assert copy_names == native_names
    assert "interpolate" in copy_names and "upsample_bilinear2d" in copy_names   # the helper's inner op was seen
    torch.testing.assert_close(copy_out, native_out, rtol=0, atol=0)


def test_fallback_sees_the_ops_inside_a_helper():
    x = torch.randn(1, 2, 4, 4)
    names, out = _log(compat._redispatch_by_copy, x)
    assert names.index("interpolate") < names.index("upsample_bilinear2d")
    assert names.index("__rsub__") < names.index("rsub")   # Tensor.__rsub__ (a wrapped Python helper), then its op
    torch.testing.assert_close(out, _helpers(x), rtol=0, atol=0)


_module_checks = sys.modules[__name__].__dict__
_THE_CHECK = (torch._C._has_torch_function_unary,)   # in a tuple: the copy replaces globals that are checks


def _scaled(x):
    """A user helper written the way torch's are: the one hop redispatch skips is this check."""
    if has_torch_function_unary(x):
        return handle_torch_function(_scaled, (x,), x)
    # the copy that runs this body sees its own check answered False, the module itself is untouched
    assert _module_checks["has_torch_function_unary"] is _THE_CHECK[0]
    return x * 3 + 1


def test_fallback_patches_nothing_that_other_threads_see():
    seen_in_thread = []
    inside = threading.Event()
    release = threading.Event()

    class Blocking(_CallLog):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("mul", "__mul__"):
                inside.set()
                release.wait(10)
            return super().__torch_function__(func, types_, args, kwargs)

    def bystander():
        inside.wait(10)
        seen_in_thread.append(has_torch_function_unary(torch.ones(1)))   # no mode in this thread
        seen_in_thread.append(F.relu6(torch.tensor([7.0])).item())
        release.set()

    thread = threading.Thread(target=bystander)
    thread.start()
    mode = Blocking(compat._redispatch_by_copy)
    x = torch.tensor([2.0])
    with mode:
        out = _scaled(x)
    thread.join(10)
    assert mode.names[:2] == ["_scaled", "mul"]
    assert out.item() == 7.0
    assert seen_in_thread == [False, 6.0]


def _through_the_module(x):
    """A helper that reaches its check through the module, as ``torch.sym_float`` does."""
    if torch.overrides.has_torch_function_unary(x):
        return torch.overrides.handle_torch_function(_through_the_module, (x,), x)
    return x.exp() - 1


@pytest.mark.parametrize("redispatch", [pytest.param(NATIVE, id="torch", marks=pytest.mark.skipif(
    NATIVE is None, reason=f"torch {torch.__version__} has no redispatch_function")),
    pytest.param(compat._redispatch_by_copy, id="fallback")])
def test_a_check_reached_through_the_module_is_skipped_once(redispatch):
    x = torch.tensor([0.5, -1.0])
    mode = _CallLog(redispatch)
    with mode:
        out = _through_the_module(x)
    assert mode.names == ["_through_the_module", "exp", "sub"]
    torch.testing.assert_close(out, x.exp() - 1)
    assert torch.overrides.has_torch_function_unary is torch._C._has_torch_function_unary


def test_fallback_refuses_what_it_cannot_copy():
    class CallableObject:
        def __call__(self, x):
            return x

    with pytest.raises(TypeError, match=r"cannot trace through .*CallableObject.*redispatch_function \(torch >= 2\.13\)"):
        compat._redispatch_by_copy(CallableObject(), (), (torch.ones(1),), {})


@pytest.mark.parametrize("redispatch", [
    pytest.param(NATIVE, id="torch", marks=pytest.mark.skipif(NATIVE is None, reason="torch < 2.13")),
    pytest.param(compat._redispatch_by_copy, id="fallback")])
def test_an_operator_handle_runs_with_its_one_hop_skipped(redispatch):
    """torch.ops.<ns>.<op> (torchvision's nms in a detector's retrace on torch 2.11, found on a GPU machine):
    a C++ operator, run once without reaching the mode again, as torch's own redispatch does."""
    seen = []

    class Log(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    x = torch.arange(4.0)
    with Log():
        results = [redispatch(op, (), (x, x), {}) for op in (torch.ops.aten.mul, torch.ops.aten.mul.Tensor)]
    assert seen == []
    assert [r.tolist() for r in results] == [[0.0, 1.0, 4.0, 9.0]] * 2


def test_fallback_calls_bound_methods_and_keyword_only_defaults():
    def helper(x, *, k=5):
        if has_torch_function_unary(x):
            return handle_torch_function(helper, (x,), x, k=k)
        return x + k

    x = torch.ones(2)
    assert compat._redispatch_by_copy(helper, (), (x,), None).tolist() == [6.0, 6.0]
    assert compat._redispatch_by_copy(helper, (), (x,), {"k": 2}).tolist() == [3.0, 3.0]

    class Shift:
        amount = 4.0

        def apply(self, t):
            if has_torch_function_unary(t):
                return handle_torch_function(self.apply, (t,), t)
            return t + self.amount

    assert compat._redispatch_by_copy(Shift().apply, (), (x,), {}).tolist() == [5.0, 5.0]


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.norm = nn.LayerNorm(5)

    def forward(self, x):
        y = F.interpolate(self.conv(x), scale_factor=2)
        y = F.max_pool2d(y, 2, ceil_mode=True) * F.adaptive_max_pool2d(y, (5, 5))
        return 1 - F.gelu(self.norm(y)).unflatten(1, (2, -1))


def test_traces_with_the_fallback_are_the_traces_of_torchs_own(monkeypatch):
    torch.manual_seed(0)
    net = _Net().eval()
    example = torch.randn(1, 4, 5, 5)
    reference = tracejit.trace(net, (example,))
    monkeypatch.setattr(recorder, "redispatch_function", compat._redispatch_by_copy)
    monkeypatch.setattr(private_rng, "redispatch_function", compat._redispatch_by_copy)
    traced = tracejit.trace(net, (example,))
    assert traced.code == reference.code
    other = torch.randn(3, 4, 5, 5)   # another batch size and other values: eager's answer moves
    assert not torch.allclose(net(other)[:1], net(example))
    torch.testing.assert_close(traced(other), net(other))


def _grids(x, y):
    a, b = torch.meshgrid(x, y, indexing="ij")   # meshgrid's check is in its helper _meshgrid
    c, d = torch.meshgrid([x, y], indexing="xy")
    return a * b + c.t() - d.t() + torch.cartesian_prod(x, y).sum() + torch.block_diag(x[:, None], y[None]).sum()


def test_a_helper_whose_check_is_in_a_helper_it_calls(monkeypatch):
    """torch.meshgrid has no check of its own: _meshgrid, which it calls, has (torchvision's anchor generator;
    on torch 2.11 a detector's trace failed with a TypeError from the C meshgrid, found on a GPU machine)."""
    example = (torch.arange(3.0), torch.arange(4.0))
    reference = tracejit.trace(_grids, example)
    monkeypatch.setattr(recorder, "redispatch_function", compat._redispatch_by_copy)
    traced = tracejit.trace(_grids, example)
    assert traced.code == reference.code and "meshgrid" in traced.code
    x, y = torch.randn(5), torch.randn(2)
    torch.testing.assert_close(traced(x, y), _grids(x, y))


def test_source_lines_with_the_fallback_point_at_the_user(monkeypatch):
    monkeypatch.setattr(recorder, "redispatch_function", compat._redispatch_by_copy)

    def f(x):
        return F.interpolate(x, size=int(x.sum().item() > 0) + 3)   # a value read inside a helper's argument

    with pytest.warns(tracejit.TracerWarning) as caught:
        tracejit.trace(f, (torch.ones(1, 1, 4),), check_trace=False)
    lines = {w.lineno for w in caught if w.filename == __file__}
    assert f.__code__.co_firstlineno + 1 in lines


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_call_classmethod_binds_function_apply_of_this_torch():
    descriptor = torch.autograd.Function.__dict__["apply"]   # a classmethod up to 2.13, a C descriptor from 2.14
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = compat.call_classmethod(descriptor, _Double, x)
    y.sum().backward()
    assert y.tolist() == [2.0, 4.0] and x.grad.tolist() == [2.0, 2.0]

    class Plain:
        @classmethod
        def who(cls, a, b=1):
            return cls.__name__, a + b

    assert compat.call_classmethod(Plain.__dict__["who"], Plain, 1, b=5) == ("Plain", 6)

