"""Helpers for tests/capture: trace a pattern, run it on new inputs next to eager and torch.jit.trace,
compare first- and second-order gradients, and save/load round trips."""
from __future__ import annotations

import io
import warnings

import torch

import tracejit


def quiet_trace(fn, example, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        return tracejit.trace(fn, example, **kwargs)


def jit_trace(fn, example):
    """torch.jit.trace as the reference; None where it refuses the pattern."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return torch.jit.trace(fn, example, check_trace=False)
        except Exception:  # noqa: BLE001 - recorded as "torch.jit.trace cannot trace it"
            return None


def leaves(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def same(a, b) -> bool:
    """Equal values, dtypes and devices (meta tensors: equal shape, dtype and device)."""
    for x, y in zip(leaves(a), leaves(b)):
        if x.dtype != y.dtype or x.device != y.device or x.shape != y.shape:
            return False
        if x.device.type != "meta" and not torch.equal(x.detach(), y.detach()):
            if not torch.allclose(x.detach(), y.detach(), rtol=1e-6, atol=1e-6, equal_nan=True):
                return False
    return len(leaves(a)) == len(leaves(b))


def assert_same(a, b, what=""):
    assert same(a, b), f"{what}: traced {describe(a)} != eager {describe(b)}"


def describe(out):
    return [(tuple(x.shape), x.dtype, x.device.type, x.detach().flatten()[:4].tolist() if x.device.type != "meta"
             else None) for x in leaves(out)]


def jit_outcomes(fn, example, new_inputs) -> str:
    """torch.jit.trace's result per new input: r (equals eager), w (wrong), e (raises); "-" if it refuses to trace."""
    jit = jit_trace(fn, example)
    if jit is None:
        return "-"
    out = ""
    for inputs in new_inputs:
        if any(x.device.type == "meta" for x in inputs if isinstance(x, torch.Tensor)):
            out += "."
            continue
        try:
            out += "r" if same(jit(*inputs), fn(*inputs)) else "w"
        except Exception:  # noqa: BLE001 - the outcome is the point
            out += "e"
    return out


def check_pattern(fn, example, new_inputs, jit_expect=None):
    """Trace ``fn`` on ``example``; on every new input the traced program equals eager.

    ``jit_expect`` documents torch.jit.trace on the same inputs (see jit_outcomes) and is asserted,
    so the side-by-side comparison stays honest. Returns the traced program.
    """
    traced = quiet_trace(fn, example)
    for i, inputs in enumerate(new_inputs):
        assert_same(traced(*inputs), fn(*inputs), f"new input {i}")
    if jit_expect is not None:
        assert jit_outcomes(fn, example, new_inputs) == jit_expect, "torch.jit.trace's documented behaviour changed"
    return traced


def grads(fn, inputs, params=()):
    """First- and second-order gradients of sum(fn(inputs)) w.r.t. the float inputs and ``params``."""
    inputs = [x.detach().clone().requires_grad_(x.is_floating_point()) if isinstance(x, torch.Tensor) else x
              for x in inputs]
    wrt = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad] + list(params)
    out = sum(o.sum() for o in leaves(fn(*inputs)) if o.is_floating_point())
    first = torch.autograd.grad(out, wrt, create_graph=True, allow_unused=True)
    total = sum((g * g).sum() for g in first if g is not None and g.requires_grad)
    if isinstance(total, int):
        second = [None] * len(wrt)
    else:
        second = torch.autograd.grad(total, wrt, allow_unused=True)
    return [None if g is None else g.detach() for g in first], [None if g is None else g.detach() for g in second]


def assert_grads_equal(traced, eager, inputs, traced_params=(), eager_params=()):
    tf, ts = grads(traced, inputs, traced_params)
    ef, es = grads(eager, inputs, eager_params)
    for kind, t, e in (("first", tf, ef), ("second", ts, es)):
        for i, (a, b) in enumerate(zip(t, e)):
            if a is None or b is None:
                assert (a is None or not a.any()) and (b is None or not b.any()), f"{kind}-order grad {i}: {a} vs {b}"
                continue
            torch.testing.assert_close(a, b, msg=f"{kind}-order gradient {i} differs from eager")


def round_trip(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


# ---- file surgery (as tests/serialize does): edit the program document, keep the checksum right ------
def tampered(traced, edit_doc) -> bytes:
    from filesurgery import rewrite
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return rewrite(buf.getvalue(), edit_doc)


def nodes_of(doc):
    p = doc["program"]
    for g in p.get("graphs", []):
        yield from g["nodes"]
