"""The one fallback policy every backend follows: when its fast program could answer otherwise than
eager, the call runs the safe program instead (or, for autocast in an exported model, is refused).

* **Changed captured tensors**: a tensor the trace read that is not a parameter or buffer (a global, a
  plain tensor attribute) stays the caller's object; an optimized or exported program holds copies.
  ``captured_tensors(graph)`` lists them with their versions; once one changed in place
  (``captured_changed``) the call runs the safe program, with one TracerWarning.
* **Non-finite inputs**: some kernels turn NaN / inf into numbers. A program holding one
  (``NONFINITE_DIFFERS`` per backend; the torch backend's oneDNN kernels say so themselves:
  ``fn.finite_inputs``) checks its floating-point arguments per call (``nonfinite_argument``: their
  sum is finite, one pass) and runs the safe program for a call with NaN or inf. The ONNX backends
  have the model compute those sums as extra outputs, read after the run (backends/input_sums.py).
* **A guard output that is False** (ONNX backends: the guards the model computes itself, backends/guard_outputs.py):
  the run's answer is dropped and the safe program's guards decide.
* **No specialization fits** (``hand_over``): a call whose guards no specialization of an optimized program
  holds (the torch backend; the ONNX backends' choice per call) is answered by the live traced object it was
  built from, which traces its original again (eager's answer), as for a False guard output; a program built
  from a loaded object, or one whose original was dropped or whose mode differs, raises the GuardError.
* **The caller's autocast** (``autocast_on``, any device): the torch backend runs its unoptimized
  program, whose recorded ops follow autocast as eager's do; an exported model computes in the dtypes
  it was exported with, so the call is refused (``refuse_autocast``).

The safe program is the traced program itself (exported backends) or the unoptimized one (torch).
"""
from __future__ import annotations

import math
import warnings

import torch

from ..errors import TracerWarning

autocast_on = torch._C._is_any_autocast_enabled   # the caller's autocast, on any device

# ops whose runtime result differs from eager's when NaN / inf reach them (found by running edge
# values through both runtimes; docs/DEPLOY.md): a program holding one runs the traced program for a
# call with a non-finite float input. A backend not listed (OpenVINO: its relu, clamp, max, exp, ...
# turn NaN into numbers) always checks: the default for an unlisted backend is the safe one.
NONFINITE_DIFFERS = {"onnxruntime": frozenset({
    "max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "adaptive_max_pool2d", "sort", "topk",
    "argsort", "msort", "median", "gelu", "pow", "floor_divide", "remainder", "fmod"})}

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def live_source(traced):
    """``traced`` where it can trace its original again (it holds it), else the live object a frozen program
    was made from (``_live``), else None: what ``hand_over`` may hand a call to."""
    sets = getattr(traced, "__dict__", {}).get("_specialization_sets") or {}
    forward = sets.get("forward")
    if forward is not None and forward.retrace is not None:
        return traced
    return getattr(traced, "__dict__", {}).get("_live")


def may_answer(live, training: bool = False) -> bool:
    """May the live traced object ``live`` answer for an optimized program in mode ``training``? Where it still
    holds its original and is in that mode: a loaded program, a dropped original, or a program switched to
    training mode never runs another mode's trace."""
    return live is not None and getattr(live, "training", False) == training and live_source(live) is live


def hand_over(live, error, args, kwargs, training: bool = False):
    """A call no specialization of an optimized program fits (``error``: the GuardError naming the line that
    pinned it): the live traced object ``live`` answers (it traces its original again: eager's answer) where
    ``may_answer``; else ``error`` stands."""
    if error.guard is None or not may_answer(live, training):
        raise error
    return live(*args, **kwargs)


def refuse_autocast(program: str):
    """An exported model computes in the dtypes it was exported with: under the caller's autocast eager
    would compute in another dtype, so the call is refused rather than answered in float32."""
    raise RuntimeError(f"{program}: called under torch.autocast, but the exported model runs in the dtypes it "
                       "was traced with and cannot follow autocast (eager would compute in the autocast dtype). "
                       "Call it outside the autocast block, or call the traced program (or optimize_for_inference's "
                       "torch backend), which follows the caller's autocast.")


def nonfinite_input(fn, args, kwargs) -> bool:
    """Does a CPU float32 tensor argument hold NaN or inf, for a program whose kernels would
    turn a NaN into a number (``fn.finite_inputs``: oneDNN's fused relu / clip)? Such a call runs
    the unoptimized program, which keeps eager's NaN. (float32 CPU only: the only inputs those
    kernels run on; a moved program's kernels fall back.)"""
    return bool(getattr(fn, "finite_inputs", False)) and nonfinite_argument(
        args, kwargs, lambda t: type(t) in _PLAIN and t.dtype is torch.float32 and t.is_cpu)


def nonfinite_argument(args, kwargs, checked=lambda t: t.is_floating_point()) -> bool:
    """Does a tensor argument (or an item of a list / tuple argument) for which ``checked(t)`` holds
    contain NaN or inf? Its sum is finite only without them (an overflow to inf just answers True,
    which is safe): one pass, 8 us on a 224x224 image where ``isfinite().all()`` takes 160."""
    for arg in (*args, *kwargs.values()):
        for t in arg if isinstance(arg, (list, tuple)) else (arg,):
            if isinstance(t, torch.Tensor) and t.numel() and checked(t) and not math.isfinite(float(t.sum())):
                return True
    return False


def captured_tensors(graph) -> tuple:
    """(tensor, version, source line) of each tensor ``graph`` reads as a constant that freeze did not
    copy: the caller's own (a global, a plain tensor attribute), which passes may have copied."""
    seen, out = set(), []
    for node in graph.nodes:
        if node.op == "tracejit::constant" and "frozen_from" not in node.attrs:
            t = graph.constants[node.attrs["index"]]
            if isinstance(t, torch.Tensor) and id(t) not in seen:
                seen.add(id(t))
                out.append((t, t._version, node.source or "an unknown line"))
    return tuple(out)


def captured_changed(program) -> bool:
    """Has a tensor the optimized ``program`` captured (``_captured``: (tensor, version, source)
    triples) changed in place since? Warns once when it first has."""
    captured = program.__dict__.get("_captured")
    if not captured:
        return False
    for tensor, version, source in captured:
        if tensor._version != version:
            if not program.__dict__.get("_captured_warned"):
                program.__dict__["_captured_warned"] = True
                warnings.warn(f"optimize_for_inference: a tensor the trace captured (read at {source}; not a "
                              "parameter or buffer) changed in place after the program was optimized; running "
                              "the unoptimized program, which reads it as it is now. Call optimize_for_inference "
                              "again for the fast path.", TracerWarning, stacklevel=3)
            return True
    return False


def nonfinite_differs(backend: str, graph) -> bool:
    """Could ``backend`` answer otherwise than eager for ``graph`` on a NaN / inf input? True for a backend
    not listed in ``NONFINITE_DIFFERS`` (default-deny), else where the graph holds one of its listed ops."""
    ops = NONFINITE_DIFFERS.get(backend)
    return ops is None or any(n.name.rstrip("_") in ops for n in graph.nodes if n.op.startswith("aten::"))


def with_finite_check(backend: str, graph, safe, call):
    """``call``, or, when ``graph`` holds an op ``backend`` computes differently on NaN / inf, a call
    that first checks its floating-point tensor arguments are finite and otherwise runs ``safe``,
    which gives eager's answer."""
    if not nonfinite_differs(backend, graph):
        return call

    def checked(*args, **kwargs):
        if nonfinite_argument(args, kwargs):
            return safe(*args, **kwargs)
        return call(*args, **kwargs)
    return checked


def with_captured_check(program, graph, safe, call):
    """``call``, or when ``graph`` captured tensors of the caller's (the exported model holds copies),
    a call that first checks they did not change in place and otherwise runs ``safe``, with a
    TracerWarning. ``program._captured`` records them."""
    program._captured = captured_tensors(graph) if graph is not None else ()
    if not program._captured:
        return call

    def checked(*args, **kwargs):
        if captured_changed(program):
            return safe(*args, **kwargs)
        return call(*args, **kwargs)
    return checked
