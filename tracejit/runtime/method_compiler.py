"""A graph compiled into the generated method a traced object calls: its source, its signature text,
the clear error for arguments that do not fit, and what a failed guard must put back (undo.py)."""
from __future__ import annotations

import reprlib

import torch

from ..codegen.signature_text import signature_text
from ..errors import ArgumentTypeError, ArgumentValueError, GuardError
from ..ir import Graph
from .undo import undo_plan
from ..lazy_module import LazyModule

# the code generator: a server whose loads all hit the code cache (serialize/code_cache.py) never imports it
_python = LazyModule("..codegen.python", __package__)


class InputError:
    """Builds the error raised when a call does not fit the traced signature."""

    def __init__(self, signature: str):
        self.signature = signature

    def __call__(self, where, value, expected, rank):
        seen = _describe(value)
        head = f"traced {self.signature}: argument '{where}'"
        if rank == "const":
            raise ArgumentValueError(f"{head} was traced as the constant {expected!r} and the trace depends on "
                                     f"it; got {seen}. Trace again to use another value.")
        if rank == "keys":   # a dict whose key set forward read (trace/input_keys.py)
            shape, line = expected
            raise GuardError(f"{head} should be {shape} with exactly these keys, in this order: forward read its "
                             f"key set at {line} (iterating it, len(), `in` or .get() of a key it did not have), so "
                             f"the trace depends on it; got {seen}. Trace again with these keys.",
                             expected=shape, seen=seen, source=line)
        if rank == "container":
            raise ArgumentTypeError(f"{head} should be {expected}; got {seen}")
        if isinstance(value, torch.Tensor) and isinstance(rank, int):
            raise ArgumentValueError(f"{head} should be a Tensor with {rank} dimensions (the trace fixed the "
                                     f"number of dimensions); got a Tensor of shape {tuple(value.shape)}")
        raise ArgumentTypeError(f"{head} should be a {expected}"
                                f"{f' with {rank} dimensions' if isinstance(rank, int) else ''}; got {seen}")


def _describe(value) -> str:
    """A short summary of a wrong argument: its type and shape, never a whole array's values."""
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype})"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of length {len(value)}"
    if isinstance(value, dict):
        return reprlib.repr(f"dict with keys {sorted(map(str, value))}")[1:-1]
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(shape, tuple) and dtype is not None:   # a numpy array (or alike) passed by mistake
        return f"{type(value).__module__.split('.')[0]}.{type(value).__name__}(shape={shape}, dtype={dtype})"
    return f"{type(value).__name__} {reprlib.repr(value)}"


def compile_method(graph: Graph, name: str, label: str, guards: bool, display: str | None = None, budget=None,
                   kernels=()):
    """``graph`` compiled as the method ``name``; ``kernels``: a lowered program's (passes/lowered.py), which
    its ``tracejit::kernel`` nodes call."""
    sig = signature_text(display or name, graph)
    budget = budget if budget is not None else getattr(graph, "call_budget", None)
    src, globs = _python.generate(graph, name, guards=guards, input_error=InputError(sig), budget=budget, kernels=kernels)
    return finish(_python.compile_function(src, name, globs, label), graph, src, sig, guards)


def finish(fn, graph: Graph, source: str, signature: str, guards: bool):
    """``fn`` with what the runtime reads on a compiled method: its graph, source and signature text, whether
    keyword-traced arguments may come by position, and what a failed guard must put back (runtime/undo.py).
    Also for a method made from the code cache (serialize/cached_methods.py)."""
    fn.graph = graph
    fn.code = source
    fn.signature = signature
    fn.by_position = guards and bool(graph.in_spec.children[1].children)   # keyword-traced args, by position too
    fn.undo = undo_plan(graph) if guards else None
    # the checks of Python state held beside the graph (ir/graph.py: tensors read from globals and attributes,
    # library modules' settings); the callers run them before the code (runtime/traced.py, runtime/specialize.py)
    fn.memory_checks = getattr(graph, "memory_checks", None) if guards else None
    return fn

