"""The torch-CPU kernels backend's programs: traced objects with a lean ``__call__``, for programs built by
freeze / optimize_for_inference (inference.py runs the passes; backends/fallback.py is the policy below).

``TracedModule.__call__`` goes through ``call_checked`` (positional spreading, arity errors)
on every call; for a batch-1 MLP that is a tenth of the call. These subclasses call the
generated function directly and fall back to the full path only when it is needed: a hook is
registered (checked per call, so a hook added later runs), the method takes keyword-traced
arguments by position, or the call itself failed (then the full path gives the same clear
error, having run nothing). Guard failures are handled as the base classes do; a call no specialization
fits then goes to the live traced object the program was made from (``_live``: backends/fallback.py
``hand_over``), as the exported backends' calls do.

Captured tensors: a tensor the trace read that is not a parameter or buffer (a global, a plain
tensor attribute) stays the caller's object. The inference passes copy some of them (re-laid-out
or folded weights), so an optimized program checks their versions on each call (``_captured``,
the full path) and, once one changed in place, runs the unoptimized program (``_unoptimized``),
which reads them as they are now, with a TracerWarning: eager's answer, never a stale one.

The caller's autocast: the inference passes fold and fuse ops into kernels (numpy, oneDNN) that
compute in float32 whatever autocast says, and a folded weight rounds otherwise than the ops it
stands for. A call made while autocast is on (any device) runs the unoptimized program, whose
recorded ops follow the caller's autocast as eager's do (one C call per call to ask).

Non-finite inputs: oneDNN's fused relu / clip turn NaN into a number. A program with such kernels
(``fn.finite_inputs``) checks its float32 CPU arguments per call (their sum is finite: 8 us on
ResNet-50's 224x224 input, 0.04% of its call) and runs the unoptimized program for a call with
NaN or inf, so NaN reaches the output as in eager.
"""
from __future__ import annotations

from ..codegen.compiler import add_trace_notes
from ..errors import GuardError
from ..runtime import late_hooks, specialize
from ..support.module_hooks import any_registered
from ..runtime.traced import TracedFunction, TracedModule, compile_method
from .fallback import autocast_on as _autocast_on, captured_changed, hand_over, nonfinite_input


class FastTracedModule(TracedModule):
    """A TracedModule whose ``__call__`` calls the generated ``forward`` directly."""

    backend = "torch"

    def __call__(self, *args, **kwargs):
        d = self.__dict__   # nn.Module keeps these in the instance dict: a key lookup each, not an attribute walk
        if any_registered():   # a global module hook (runtime/late_hooks.py)
            late_hooks.check_global(self, d["forward"].graph)
        if _autocast_on() and "_unoptimized" in d:
            return d["_unoptimized"](*args, **kwargs)
        if d["_forward_hooks"] or d["_forward_pre_hooks"] or d["_backward_hooks"] or d["_backward_pre_hooks"] \
                or d.get("_slow_call", True):
            if captured_changed(self) or nonfinite_input(d.get("forward"), args, kwargs):
                return self._unoptimized(*args, **kwargs)
            try:
                return TracedModule.__call__(self, *args, **kwargs)
            except GuardError as e:   # no specialization fits: the live object it was made from answers
                return hand_over(d.get("_live"), e, args, kwargs, self.training)
        try:
            changed = d["_memory_changed"]   # the forward's memory checks (_install), or None
            changed is None or not changed() or d["forward"].memory_checks.fail(self.original_name)
            return d["forward"](*args, **kwargs)
        except GuardError as e:
            return _after_guard_failure(self, e, args, kwargs)
        except TypeError as e:
            if e.__traceback__.tb_next is None:   # the call itself: nothing ran; the full path explains
                return TracedModule.__call__(self, *args, **kwargs)
            add_trace_notes(e)
            raise
        except Exception as e:
            add_trace_notes(e)
            raise

    def _apply(self, fn, *args, **kwargs):
        result = super()._apply(fn, *args, **kwargs)
        if self.__dict__.get("_captured"):   # it now runs moved copies of them: a snapshot, as a moved trace
            self.__dict__["_captured"] = ()
            self.__dict__["_slow_call"] = _slow(self.__dict__.get("forward"), ())
        return result

    def _install(self, name: str, fn) -> None:
        super()._install(name, fn)
        if name == "forward":
            self.__dict__["_slow_call"] = _slow(fn, self.__dict__.get("_captured"))
            checks = getattr(fn, "memory_checks", None)   # held beside the graph (runtime/method_compiler.py)
            self.__dict__["_memory_changed"] = None if checks is None else checks.changed


class FastTracedFunction(TracedFunction):
    """A TracedFunction whose ``__call__`` calls the generated function directly."""

    backend = "torch"

    @classmethod
    def from_compiled(cls, name: str, fn, ledger) -> "FastTracedFunction":
        """Wrap an already compiled method (``compile_method``) without compiling again."""
        out = cls.__new__(cls)
        out.__name__ = name
        out._fn = fn
        out.ledger = tuple(ledger)
        out._captured = ()
        return out

    def __call__(self, *args, **kwargs):
        fn = self._fn
        if any_registered():   # a global module hook (runtime/late_hooks.py)
            late_hooks.check_global(self, fn.graph)
        if _autocast_on() and "_unoptimized" in self.__dict__:
            return self._unoptimized(*args, **kwargs)
        if fn.by_position or self._captured or getattr(fn, "finite_inputs", False) \
                or getattr(fn, "undo", None) is not None:
            if captured_changed(self) or nonfinite_input(fn, args, kwargs):
                return self._unoptimized(*args, **kwargs)
            try:
                return TracedFunction.__call__(self, *args, **kwargs)
            except GuardError as e:
                return hand_over(self.__dict__.get("_live"), e, args, kwargs)
        try:
            checks = getattr(fn, "memory_checks", None)   # held beside the graph (runtime/method_compiler.py)
            checks is None or not checks.changed() or checks.fail(self.__name__)
            return fn(self, *args, **kwargs)
        except GuardError as e:
            return _after_guard_failure(self, e, args, kwargs)
        except TypeError as e:
            if e.__traceback__.tb_next is None:
                return TracedFunction.__call__(self, *args, **kwargs)
            add_trace_notes(e)
            raise
        except Exception as e:
            add_trace_notes(e)
            raise




def _after_guard_failure(program, error: GuardError, args, kwargs):
    """A guard of the first trace failed: another specialization that fits answers, else the live traced
    object the program was made from (backends/fallback.py ``hand_over``), else the GuardError."""
    try:
        return specialize.on_guard_failure(program, error, args, kwargs)
    except GuardError as e:
        return hand_over(program.__dict__.get("_live"), e, args, kwargs, getattr(program, "training", False))


def _slow(fn, captured) -> bool:
    """Must calls of the generated ``fn`` take the full path (see the class docstrings)?"""
    return bool(getattr(fn, "by_position", False) or captured or getattr(fn, "finite_inputs", False)
                or getattr(fn, "undo", None) is not None)


def compile_for_inference(saved_graph, lowered, name: str, label: str, display: str | None = None):
    """Compile ``lowered`` (passes/lowered.py: the graph that runs, whose kernel nodes call its kernels) as a
    guarded method whose ``.graph`` is ``saved_graph`` (what ``save`` writes), ``.run_graph`` the graph that
    runs and ``.lowered`` the lowered program (graph and kernels)."""
    fn = compile_method(lowered.graph, name, label, guards=True, display=display, kernels=lowered.kernels)
    fn.graph = saved_graph
    fn.run_graph = lowered.graph
    fn.lowered = lowered
    fn.finite_inputs = any(getattr(k, "drops_nan", False) for k in lowered.kernels)
    return fn
