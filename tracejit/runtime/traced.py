"""TracedFunction and TracedModule: what trace() returns.

Each traced method is a generated Python function (see ``.code``), compiled
once; calling the traced object calls it directly.
"""
from __future__ import annotations

import reprlib
import types

import torch
from torch import nn

from ..codegen.compiler import add_trace_notes
from ..codegen.python import compile_function, generate
from ..errors import ArgumentTypeError, ArgumentValueError, GuardError
from ..ir import Graph, Value
from ..passes.inline import inline_calls
from . import specialize
from .constants import move_constants
from .undo import undo_plan, undoable_call


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


def signature_text(name: str, graph: Graph, leaf_text=None) -> str:
    """``forward(x: Tensor[4d], pair: (Tensor[2d], Tensor[2d]), flag=True)``.

    ``leaf_text`` formats one input leaf (a Value or a constant); the default shows ranks.
    """
    leaf_text = leaf_text or _rank_text
    args_spec, kwargs_spec = graph.in_spec.children
    leaves = iter(graph.input_leaves)
    parts = []
    for pname, spec in zip(graph.param_names, list(args_spec.children) + list(kwargs_spec.children)):
        mine = [next(leaves) for _ in range(spec.num_leaves)]
        if spec.kind == "leaf" and not isinstance(mine[0], Value):
            parts.append(f"{pname}={mine[0]!r}")
        else:
            parts.append(f"{pname}: {spec.describe(leaf_text(x) for x in mine)}")
    return f"{name}({', '.join(parts)})"


def _rank_text(leaf) -> str:
    if isinstance(leaf, Value):
        return f"Tensor[{len(leaf.type.shape)}d]" if hasattr(leaf.type, "shape") else str(leaf.type)
    return repr(leaf)


def compile_method(graph: Graph, name: str, label: str, guards: bool, display: str | None = None, budget=None):
    sig = signature_text(display or name, graph)
    budget = budget if budget is not None else getattr(graph, "call_budget", None)
    src, globs = generate(graph, name, guards=guards, input_error=InputError(sig), budget=budget)
    fn = compile_function(src, name, globs, label)
    fn.graph = graph
    fn.code = src
    fn.signature = sig
    fn.by_position = guards and bool(graph.in_spec.children[1].children)   # keyword-traced args, by position too
    fn.undo = undo_plan(graph) if guards else None   # what a failed guard must put back (runtime/undo.py)
    return fn


def call_checked(fn, signature: str, args, kwargs, graph: Graph | None = None):
    """Call a generated function; turn a Python arity error at the call itself into a clear TypeError.

    Arguments traced as keywords may also be passed by position, in the order of the traced
    function's parameters (as torch.jit's traced programs take them).
    """
    if graph is not None and args:
        args, kwargs = spread_positional(graph, signature, args, kwargs)
    try:
        return fn(*args, **kwargs)
    except GuardError:
        raise
    except TypeError as e:
        tb = e.__traceback__
        if tb is not None and tb.tb_next is None:
            kw = f"keyword arguments {sorted(kwargs)}" if kwargs else "no keyword arguments"
            raise ArgumentTypeError(f"traced {signature} was called with {len(args)} positional argument(s) "
                                    f"and {kw}: {e}") from None
        add_trace_notes(e)
        raise
    except Exception as e:
        add_trace_notes(e)   # the generated lines it passed and the source lines they were traced from
        raise


def spread_positional(graph: Graph, signature: str, args: tuple, kwargs: dict):
    """Positional arguments beyond those traced positionally go to the keyword-traced parameters, in order."""
    n_pos = len(graph.in_spec.children[0].children)
    if len(args) <= n_pos:
        return args, kwargs
    keyword_names = graph.param_names[n_pos:]
    extra = args[n_pos:]
    if len(extra) > len(keyword_names):
        raise ArgumentTypeError(f"traced {signature} takes at most {len(graph.param_names)} arguments; got "
                                f"{len(args)} positional argument(s)")
    kwargs = dict(kwargs)
    for name, value in zip(keyword_names, extra):
        if name in kwargs:
            raise ArgumentTypeError(f"traced {signature} got multiple values for argument {name!r}")
        kwargs[name] = value
    return args[:n_pos], kwargs


class TracedFunction:
    """A traced plain function. Call it like the original.

    >>> import torch, tracejit
    >>> f = tracejit.trace(lambda x, y: 2 * x + y, (torch.ones(3), torch.ones(3)))
    >>> f(torch.zeros(2), torch.ones(2))
    tensor([1., 1.])
    """

    def __init__(self, name: str, graph: Graph, ledger):
        self.__name__ = name
        self._fn = compile_method(graph, "forward", name, guards=True, display=name)
        self.ledger = tuple(ledger)

    @property
    def graph(self) -> Graph:
        return self._fn.graph

    @property
    def inlined_graph(self) -> Graph:
        return self._fn.graph

    @property
    def code(self) -> str:
        return self._fn.code

    @property
    def signature(self) -> str:
        return self._fn.signature

    @property
    def original_name(self) -> str:
        return self.__name__

    @property
    def code_with_constants(self):
        return code_with_constants(self.code, self.graph)

    def save(self, f, _extra_files=None, **options) -> None:
        """Save to ``f`` (a path or a binary file object), as ``tracejit.save(self, f, ...)``."""
        from ..porting import save
        save(self, f, _extra_files, **options)

    def __call__(self, *args, **kwargs):
        fn = self._fn
        try:
            if getattr(fn, "undo", None) is None:   # the common case: nothing to put back if a guard fails
                return call_checked(types.MethodType(fn, self), fn.signature, args, kwargs, fn.graph)
            return undoable_call(fn, self, args, kwargs)
        except GuardError as e:
            return specialize.on_guard_failure(self, e, args, kwargs)

    def _run(self, args, kwargs):   # the first trace only: the checker reports a failed guard
        return undoable_call(self._fn, self, args, kwargs)

    @property
    def specializations(self) -> list:
        """Every trace this object chooses from per call, newest first, the first trace last
        (see runtime/specialize.py)."""
        spec_set = specialize.sets_of(self).get("forward")
        return list(spec_set.entries) if spec_set is not None else []

    @property
    def _specializations(self):
        return specialize.sets_of(self).get("forward")

    def drop_original(self) -> None:
        """Release the original function: a failed guard then raises GuardError instead of retracing."""
        specialize.drop_original(self)

    def __repr__(self) -> str:
        return f"<TracedFunction {self._fn.signature}>"

    def to_html(self, path) -> str:
        """Write an interactive, self-contained HTML view of the graph (tracejit/viewer)."""
        from ..viewer import view
        return view(self, path)


class TracedModule(nn.Module):
    """A traced nn.Module: same submodules, parameters and buffers as the original
    (the very same tensors), with each traced method replaced by generated code.
    """

    def __init__(self, original_name: str):
        super().__init__()
        self.original_name = original_name
        self._traced_methods: dict[str, types.FunctionType] = {}
        self.ledger: tuple = ()
        self._variants: dict[bool, dict] = {}   # training flag -> {path: {method: fn}} (root only)
        self._retrace = None                    # training flag -> {path: {method: fn}}, or None

    def _get_name(self) -> str:
        return self.original_name

    def _apply(self, fn, *args, **kwargs):
        result = super()._apply(fn, *args, **kwargs)
        move_constants(self, fn)   # tensors captured as constants move with the parameters
        return result

    def extra_repr(self) -> str:
        return f"original_name={self.original_name}"

    def _install(self, name: str, fn) -> None:
        self._traced_methods[name] = fn
        if getattr(fn, "by_position", False):
            # a method traced from keyword examples also takes them by position (also when hooks route
            # forward through nn.Module.__call__)
            def method(*args, **kwargs):
                return call_checked(types.MethodType(fn, self), fn.signature, args, kwargs, fn.graph)
            method.graph, method.code, method.signature, method.__name__ = fn.graph, fn.code, fn.signature, name
            object.__setattr__(self, name, method)
            return
        object.__setattr__(self, name, types.MethodType(fn, self))

    def forward(self, *args, **kwargs):  # replaced per instance by _install
        raise RuntimeError(f"{self.original_name} was not called while tracing, so it has no traced forward")

    def __call__(self, *args, **kwargs):
        if self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or self._backward_pre_hooks:
            return super().__call__(*args, **kwargs)
        fn = self._traced_methods.get("forward")
        if fn is None:
            return self.forward(*args, **kwargs)
        try:
            if getattr(fn, "undo", None) is None:   # the common case: nothing to put back if a guard fails
                return call_checked(self.forward, fn.signature, args, kwargs, fn.graph)
            return undoable_call(fn, self, args, kwargs)
        except GuardError as e:
            return specialize.on_guard_failure(self, e, args, kwargs)

    def _run(self, args, kwargs):   # the first trace only: the checker reports a failed guard
        return undoable_call(self._traced_methods["forward"], self, args, kwargs)

    @property
    def specializations(self) -> list:
        """Every trace of ``forward`` this module chooses from per call, newest first, the first trace
        last (see runtime/specialize.py)."""
        spec_set = specialize.sets_of(self).get("forward")
        return list(spec_set.entries) if spec_set is not None else []

    @property
    def _specializations(self):
        return specialize.sets_of(self).get("forward")

    def drop_original(self) -> None:
        """Release the original module: a failed guard then raises GuardError instead of retracing."""
        specialize.drop_original(self)

    @property
    def graph(self) -> Graph:
        return self._method("forward").graph

    @property
    def code(self) -> str:
        return self._method("forward").code

    @property
    def inlined_graph(self) -> Graph:
        return inline_calls(self._method("forward").graph)

    @property
    def code_with_constants(self):
        return code_with_constants(self.code, self.graph)

    def save(self, f, _extra_files=None, **options) -> None:
        """Save to ``f`` (a path or a binary file object), as ``tracejit.save(self, f, ...)``."""
        from ..porting import save
        save(self, f, _extra_files, **options)

    def to_html(self, path) -> str:
        """Write an interactive, self-contained HTML view of the graphs (tracejit/viewer)."""
        from ..viewer import view
        return view(self, path)

    def _method(self, name: str):
        fn = self._traced_methods.get(name)
        if fn is None:
            raise AttributeError(f"{self.original_name} has no traced method {name!r} (it was not called "
                                 "while tracing)")
        return fn


def code_with_constants(code: str, graph: Graph):
    """``(code, constants)`` as torch.jit's ``code_with_constants``: the tensors the code names, by index."""
    return code, {f"c{i}": c for i, c in enumerate(graph.constants)}


def compile_methods(methods: dict, root_methods: dict, label: str) -> dict:
    """Compile every graph: ``{path: {method: fn}}``; root methods get input guards."""
    out: dict = {}
    for path, graphs in methods.items():
        out[path] = {m: compile_method(g, m, f"{label}.{path}" if path else label, guards=False)
                     for m, g in graphs.items()}
    root = out.setdefault("", {})
    for mname, graph in root_methods.items():
        root[mname] = compile_method(graph, mname, label, guards=True)
    return out


def build_module(original: nn.Module, compiled: dict) -> TracedModule:
    """Mirror ``original``'s hierarchy, sharing its parameters and buffers, with compiled methods."""
    made: dict[int, TracedModule] = {}

    def mirror(mod: nn.Module, path: str) -> TracedModule:
        if id(mod) in made:
            return made[id(mod)]
        tm = TracedModule(type(mod).__name__)
        made[id(mod)] = tm
        tm.training = mod.training
        for name, p in mod._parameters.items():
            tm._parameters[name] = p
        for name, b in mod._buffers.items():
            tm._buffers[name] = b
        tm._non_persistent_buffers_set = set(mod._non_persistent_buffers_set)
        for name, child in mod._modules.items():
            if child is not None:   # a submodule attribute set to None is skipped, as torch.jit does
                tm._modules[name] = mirror(child, f"{path}.{name}" if path else name)
        for mname, fn in compiled.get(path, {}).items():
            tm._install(mname, fn)
        return tm

    root = mirror(original, "")
    root._variants[original.training] = compiled
    return root
