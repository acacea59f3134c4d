"""Is a candidate of ``optimize_for_inference(backend="auto")`` as exact as the traced program?

1. **Close to the traced program**: every output equals the traced program's up to reassociation
   (``assert_close`` at ``rtol = atol = 1e-4`` of the output's scale); integer and boolean outputs exactly.
2. **No further from the float64 answer than the traced program**. Where the traced object holds its
   original module (a live trace of an ``nn.Module`` holding at most ``MAX_COPY_BYTES`` of tensors), the
   original runs once in float64 (``float64_reference``: a deep copy with the traced module's tensors, the
   caller's random generator only read), and for every floating output
   ``max|candidate - float64| <= 1.25 * max|traced - float64| + 8 fp32 ulps of the output's scale``,
   with shapes and every non-floating output equal to the traced program's. A candidate checked after the
   torch backend's program was kept (``peer``: onnxruntime, OpenVINO, CUDA graphs) may also go as far as
   that program, as torch.jit's freeze is measured against eager: ``<= 1.25 * torch program's distance +
   1 ulp`` passes too (folding a batch norm into its conv rounds once where eager rounds twice and moves a
   ResNet's answer ~2x eager's distance from float64, torch.jit's freeze's too). The torch program's distance
   widens the test, never narrows it: a 1-ulp slack in place of the 8 left DenseNet-121's onnxruntime at
   batch 8 out, 5.93e-7 from float64 against a bound of 5.88e-7 (1.25 * the traced program's 3.67e-7 + 1 ulp
   of 1.08), where torch.jit's freeze is 5.98e-7 from it: the largest error of one fp32 program and of another
   reassociation differ by more than 1.25x by chance (freeze: 1.63x eager's there).

A candidate is kept when it passes both, or test 2 alone: some outputs move by more than 1e-4 under fp32
reassociation (a detector's boxes and masks after thresholds: on torchvision's Mask R-CNN the traced
program's masks are 3e-2 from the float64 answer, onnxruntime's 4e-3). Test 1 alone does not do: OpenVINO's
FCN-ResNet50 is within it, yet 2.7e-5 from the float64 answer where eager and torch.jit's freeze are 1.2e-5.
Test 2 applies only where the reference is usable: the traced program within ``5e-2`` of the scale of the
float64 answer, and ``1e-4`` on average (a reference that is not the same computation, a branch on the
dtype, must not widen the test), finite, of the same structure and shapes. No usable reference (a loaded
program, a traced function, a float64 run that fails): test 1 only (default-deny).

>>> import torch
>>> want = torch.linspace(0, 1, 1000)                 # the traced program's answer
>>> check_same(want + 1e-6, want)                     # test 1
''
>>> float64 = want.double(); float64[0] = 0.015       # the original in float64: one element moves
>>> got = want.clone(); got[0] = 0.01                 # a candidate 1e-2 from the traced program there
>>> check_same(got, want, lambda: float64)[:60]       # test 2 alone
'differs from the traced program beyond 1e-4 of the scale, bu'
>>> check_same(want + 1e-6, want, lambda: float64)    # both
''
>>> check_same(got, want, lambda: None)  # doctest: +ELLIPSIS
Traceback (most recent call last):
AssertionError: Tensor-likes are not close!...
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_leaves, tree_map

from .runtime.lending import float64_original
from .runtime.private_rng import PrivateRandomness

RTOL = 1e-4                 # test 1, of the output's scale
FLOAT64_FACTOR = 1.25       # test 2: the candidate's distance to float64 over the traced program's
FLOAT64_ULPS = 8            # ... plus this many fp32 ulps of the output's scale
PEER_ULPS = 1               # ... or 1.25x the torch program's distance (``peer``) plus this many
# test 2 applies only where the traced program is this close to float64 (of the scale): at most ...
REFERENCE_MAX = 5e-2        # ... here (a mask's pixel after a threshold moves by ~1e-2 under reassociation)
REFERENCE_MEAN = 1e-4       # ... and on average here (a different computation moves most elements)
MAX_COPY_BYTES = 1 << 30    # no float64 copy of a module holding more (it would take twice that): test 1 only


def check_same(got: Any, want: Any, reference: Callable[[], Any] | None = None, peer: Any = None) -> str:
    """Raise AssertionError where ``got`` is not as exact as the traced program's ``want`` (module docstring).
    ``reference``: a thunk returning the original's float64 answer (or None); ``peer``: the torch backend's
    answer where that program was kept (or None). Returns a note where test 2 kept a candidate test 1 would
    leave out, else ''."""
    got_leaves, want_leaves = tree_leaves(got), tree_leaves(want)
    if len(got_leaves) != len(want_leaves):
        raise ValueError(f"{len(got_leaves)} outputs where the traced program gives {len(want_leaves)}")
    peer_leaves = tree_leaves(peer) if peer is not None else []
    def verdict():   # test 2, where a reference is usable; None where not
        ref = reference() if reference is not None else None
        return _against_float64(got_leaves, want_leaves, tree_leaves(ref), peer_leaves) if ref is not None else None

    try:
        _close_to_traced(got_leaves, want_leaves)
    except AssertionError:
        second = verdict()
        if second is None or not second[0]:
            raise
        return (f"differs from the traced program beyond 1e-4 of the scale, but is no further from the float64 "
                f"answer ({second[1]:.1e}) than the traced program ({second[2]:.1e})")
    second = verdict()
    if second is not None and not second[0]:
        distance = (f"{second[1]:.1e} from the original's float64 answer, where the traced program is "
                    f"{second[2]:.1e}" if second[1] < float("inf") else "differs from the traced program's")
        raise AssertionError(f"{second[3]}: {distance}: beyond fp32 reassociation")
    return ""


def _close_to_traced(got: list, want: list) -> None:
    """Test 1: AssertionError where an output is further than 1e-4 of the scale (integers: not equal)."""
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor) and w.is_floating_point() and w.numel():
            scale = max(1.0, w.abs().max().item())
            torch.testing.assert_close(g, w, rtol=RTOL, atol=RTOL * scale)
        else:
            torch.testing.assert_close(g, w, rtol=0, atol=0)


def _against_float64(got: list, want: list, ref: list, peer: list = ()) -> tuple[bool, float, float, str] | None:
    """Test 2 of the module docstring: (passed, the candidate's distance to float64, the traced program's, which
    output) at the output that failed by the largest share of its bound, or where all passed at the output where
    the candidate is furthest; None where the reference is not usable (another structure, a shape of its own,
    non-finite values, or not the same computation)."""
    if len(ref) != len(want):
        return None
    peer = list(peer) if len(peer) == len(want) else [None] * len(want)
    worst, failed = (0.0, 0.0, ""), (0.0, 0.0, 0.0, "")   # (distance, traced's, where), (share of bound, ...)
    for i, (g, w, r, p) in enumerate(zip(got, want, ref, peer)):
        where = f"output {i}" if len(want) > 1 else "the output"
        if not (isinstance(w, torch.Tensor) and w.is_floating_point()):
            same = (isinstance(g, torch.Tensor) and g.shape == w.shape and torch.equal(g, w)) \
                if isinstance(w, torch.Tensor) else g == w
            if not same:
                failed = max(failed, (float("inf"), float("inf"), 0.0, f"{where} (not floating)"))
            continue
        if not (isinstance(r, torch.Tensor) and r.shape == w.shape):
            return None
        if not (isinstance(g, torch.Tensor) and g.shape == w.shape and g.dtype == w.dtype):
            failed = max(failed, (float("inf"), float("inf"), 0.0, f"{where} (another shape or dtype)"))
            continue
        if not w.numel():
            continue
        g64, w64, r64 = g.double(), w.double(), r.double()
        if not bool(torch.isfinite(w64).all() and torch.isfinite(r64).all()):
            return None
        scale = max(1.0, w64.abs().max().item())
        traced_err = (w64 - r64).abs().max().item()
        if traced_err > REFERENCE_MAX * scale or (w64 - r64).abs().mean().item() > REFERENCE_MEAN * scale:
            return None
        got_err = (g64 - r64).abs().max().item() if bool(torch.isfinite(g64).all()) else float("inf")
        ulp = torch.finfo(torch.float32).eps * scale
        bound = FLOAT64_FACTOR * traced_err + FLOAT64_ULPS * ulp
        torch_err = _peer_distance(r64, p)
        if torch_err is not None:
            bound = max(bound, FLOAT64_FACTOR * torch_err + PEER_ULPS * ulp)
        if got_err > bound:
            failed = max(failed, (got_err / bound, got_err, traced_err, where))
        worst = max(worst, (got_err, traced_err, where))
    if failed[0]:
        return False, failed[1], failed[2], failed[3]
    return True, worst[0], worst[1], worst[2]


def _peer_distance(r64: torch.Tensor, peer) -> float | None:
    """The torch program's answer ``peer``'s distance to the float64 answer ``r64``; None where it is no
    usable answer (another shape, not floating, not finite)."""
    if not (isinstance(peer, torch.Tensor) and peer.shape == r64.shape and peer.is_floating_point()):
        return None
    p64 = peer.double()
    if not bool(torch.isfinite(p64).all()):
        return None
    return (p64 - r64).abs().max().item()


def float64_reference(traced, args: tuple, kwargs: dict) -> Callable[[], Any]:
    """A thunk: the traced object's original computation in float64 on ``args`` / ``kwargs`` (floating
    tensors cast), computed on first call and kept; None where there is no original or it fails."""
    return functools.cache(lambda: _run_float64(traced, args, kwargs))


def _run_float64(traced, args: tuple, kwargs: dict):
    if not isinstance(traced, torch.nn.Module) or _tensor_bytes(traced) > MAX_COPY_BYTES:
        return None
    try:
        clone = float64_original(traced)
        if clone is None:
            return None
        cast = lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t  # noqa: E731
        a, k = tree_map(cast, (tuple(args), dict(kwargs)))
        with torch.no_grad(), PrivateRandomness():   # the caller's generator is only read
            return clone(*a, **k)
    except Exception:  # noqa: BLE001  (an original that does not run in float64 gives no reference)
        return None


def _tensor_bytes(module) -> int:
    seen, total = set(), 0
    for t in list(module.parameters()) + list(module.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total
