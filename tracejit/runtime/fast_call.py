"""Traced objects with a lean ``__call__``, for programs built by freeze / optimize_for_inference.

``TracedModule.__call__`` goes through ``call_checked`` (positional spreading, arity errors)
on every call; for a batch-1 MLP that is a tenth of the call. These subclasses call the
generated function directly and fall back to the full path only when it is needed: a hook is
registered (checked per call, so a hook added later runs), the method takes keyword-traced
arguments by position, or the call itself failed (then the full path gives the same clear
error, having run nothing). Guard failures are handled exactly as the base classes do.
"""
from __future__ import annotations

from ..errors import GuardError
from . import specialize
from .traced import TracedFunction, TracedModule, compile_method


class FastTracedModule(TracedModule):
    """A TracedModule whose ``__call__`` calls the generated ``forward`` directly."""

    def __call__(self, *args, **kwargs):
        d = self.__dict__   # nn.Module keeps these in the instance dict: a key lookup each, not an attribute walk
        if d["_forward_hooks"] or d["_forward_pre_hooks"] or d["_backward_hooks"] or d["_backward_pre_hooks"] \
                or d.get("_slow_call", True):
            return TracedModule.__call__(self, *args, **kwargs)
        try:
            return d["forward"](*args, **kwargs)
        except GuardError as e:
            return specialize.on_guard_failure(self, e, self._run, args, kwargs)
        except TypeError as e:
            if e.__traceback__.tb_next is None:   # the call itself: nothing ran; the full path explains
                return TracedModule.__call__(self, *args, **kwargs)
            raise

    def _install(self, name: str, fn) -> None:
        super()._install(name, fn)
        if name == "forward":
            self.__dict__["_slow_call"] = bool(getattr(fn, "by_position", False))


class FastTracedFunction(TracedFunction):
    """A TracedFunction whose ``__call__`` calls the generated function directly."""

    @classmethod
    def from_compiled(cls, name: str, fn, ledger) -> "FastTracedFunction":
        """Wrap an already compiled method (``compile_method``) without compiling again."""
        out = cls.__new__(cls)
        out.__name__ = name
        out._fn = fn
        out.ledger = tuple(ledger)
        return out

    def __call__(self, *args, **kwargs):
        fn = self._fn
        if fn.by_position:
            return TracedFunction.__call__(self, *args, **kwargs)
        try:
            return fn(self, *args, **kwargs)
        except GuardError as e:
            return specialize.on_guard_failure(self, e, self._run, args, kwargs)
        except TypeError as e:
            if e.__traceback__.tb_next is None:
                return TracedFunction.__call__(self, *args, **kwargs)
            raise


def compile_for_inference(saved_graph, run_graph, name: str, label: str, display: str | None = None):
    """Compile ``run_graph`` (what runs; may hold in-memory-only nodes) as a guarded method whose
    ``.graph`` is ``saved_graph`` (what ``save`` writes) and ``.run_graph`` the one that runs."""
    fn = compile_method(run_graph, name, label, guards=True, display=display)
    fn.graph = saved_graph
    fn.run_graph = run_graph
    return fn
