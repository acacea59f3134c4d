"""Is a candidate of ``optimize_for_inference(backend="auto")`` as exact as the traced program?

Two tests, the second only where the first fails:

1. **Close to the traced program**: every output equals the traced program's up to reassociation
   (``assert_close`` at ``rtol = atol = 1e-4`` of the output's scale); integer and boolean outputs exactly.
2. **No further from the float64 answer than the traced program**: some outputs move by more than that under
   fp32 reassociation alone (a detector's boxes after thresholds and rounding: the traced program itself is
   ~1e-2 away from the float64 answer on torchvision's Mask R-CNN, and torch.jit's freeze ~2e-2 from the
   traced program). Where the traced object holds its original module (a live trace of an ``nn.Module``),
   the original runs once in float64 (a deep copy with the traced module's tensors, ``float64_reference``),
   and the candidate passes when, for every floating output,
   ``max|candidate - float64| <= 1.25 * max|traced - float64| + 8 fp32 ulps of the output's scale``,
   its shapes and every non-floating output equal the traced program's, and the traced program is itself
   within ``5e-2`` of the scale of the float64 answer, and ``1e-4`` of it on average: a reference that is
   not the same computation (a branch on the dtype) must not widen the test.
   No original (a loaded program, a traced function), or a float64 run that fails: the first test only
   (default-deny).

>>> import torch
>>> want = torch.linspace(0, 1, 1000)                 # the traced program's answer
>>> check_same(want + 1e-6, want)                     # test 1
''
>>> float64 = want.double(); float64[0] = 0.015       # the original in float64: one element moves
>>> got = want.clone(); got[0] = 0.01                 # a candidate 1e-2 from the traced program there
>>> check_same(got, want, lambda: float64)[:60]       # test 2
'differs from the traced program beyond 1e-4 of the scale, bu'
>>> check_same(got, want, lambda: None)  # doctest: +ELLIPSIS
Traceback (most recent call last):
AssertionError: Tensor-likes are not close!...
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import tree_leaves, tree_map

RTOL = 1e-4                 # test 1, of the output's scale
FLOAT64_FACTOR = 1.25       # test 2: the candidate's distance to float64 over the traced program's
FLOAT64_ULPS = 8            # ... plus this many fp32 ulps of the output's scale
# test 2 applies only where the traced program is this close to float64 (of the scale): at most ...
REFERENCE_MAX = 5e-2        # ... here (a mask's pixel after a threshold moves by ~1e-2 under reassociation)
REFERENCE_MEAN = 1e-4       # ... and on average here (a different computation moves most elements)


def check_same(got: Any, want: Any, reference: Callable[[], Any] | None = None) -> str:
    """Raise where ``got`` is not as exact as the traced program's ``want`` (module docstring). ``reference``:
    a thunk returning the float64 answer (or None); called only where test 1 fails. Returns '' after
    test 1, else a note saying test 2 passed and by how much."""
    got_leaves, want_leaves = tree_leaves(got), tree_leaves(want)
    if len(got_leaves) != len(want_leaves):
        raise ValueError(f"{len(got_leaves)} outputs where the traced program gives {len(want_leaves)}")
    try:
        for g, w in zip(got_leaves, want_leaves):
            if isinstance(w, torch.Tensor) and w.is_floating_point() and w.numel():
                scale = max(1.0, w.abs().max().item())
                torch.testing.assert_close(g, w, rtol=RTOL, atol=RTOL * scale)
            else:
                torch.testing.assert_close(g, w, rtol=0, atol=0)
        return ""
    except AssertionError:
        ref = reference() if reference is not None else None
        note = _closer_to_float64(got_leaves, want_leaves, tree_leaves(ref)) if ref is not None else None
        if note is None:
            raise
        return note


def _closer_to_float64(got: list, want: list, ref: list) -> str | None:
    """Test 2 of the module docstring: a note, or None where it fails."""
    if len(ref) != len(want):
        return None
    worst = (0.0, 0.0)
    for g, w, r in zip(got, want, ref):
        if not (isinstance(w, torch.Tensor) and w.is_floating_point()):
            if not (isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor) and g.shape == w.shape
                    and torch.equal(g, w)) and not (not isinstance(w, torch.Tensor) and g == w):
                return None
            continue
        if not (isinstance(g, torch.Tensor) and isinstance(r, torch.Tensor) and g.shape == w.shape == r.shape
                and g.dtype == w.dtype):
            return None
        if not w.numel():
            continue
        g64, w64, r64 = g.double(), w.double(), r.double()
        if not bool(torch.isfinite(g64).all() and torch.isfinite(w64).all() and torch.isfinite(r64).all()):
            return None
        scale = max(1.0, w64.abs().max().item())
        traced_err = (w64 - r64).abs().max().item()
        got_err = (g64 - r64).abs().max().item()
        if traced_err > REFERENCE_MAX * scale or (w64 - r64).abs().mean().item() > REFERENCE_MEAN * scale:
            return None
        if got_err > FLOAT64_FACTOR * traced_err + FLOAT64_ULPS * torch.finfo(torch.float32).eps * scale:
            return None
        worst = max(worst, (got_err, traced_err))
    return (f"differs from the traced program beyond 1e-4 of the scale, but is no further from the float64 "
            f"answer ({worst[0]:.1e}) than the traced program ({worst[1]:.1e})")


def float64_reference(traced, args: tuple, kwargs: dict) -> Callable[[], Any]:
    """A thunk: the traced object's original computation in float64 on ``args`` / ``kwargs`` (floating
    tensors cast), computed on first call and kept; None where there is no original or it fails."""
    box: list = []

    def get():
        if not box:
            box.append(_run_float64(traced, args, kwargs))
        return box[0]
    return get


def _run_float64(traced, args: tuple, kwargs: dict):
    make = traced.__dict__.get("_float64_original")
    if make is None:
        return None
    try:
        clone = make(traced)
        if clone is None:
            return None
        cast = lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t  # noqa: E731
        a, k = tree_map(cast, (tuple(args), dict(kwargs)))
        with torch.no_grad():
            return clone(*a, **k)
    except Exception:  # noqa: BLE001  (an original that does not run in float64 gives no reference)
        return None
