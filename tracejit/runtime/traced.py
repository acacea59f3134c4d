"""TracedFunction and TracedModule: what trace() returns.

Each traced method is a generated Python function (see ``.code``), compiled
once; calling the traced object calls it directly.
"""
from __future__ import annotations

import types

import torch
from torch import nn

from ..codegen.python import compile_function, generate
from ..errors import GuardError
from ..ir import Graph, Value
from ..passes.inline import inline_calls
from ..passes.inplace import mark_inplace_reuse


class InputError:
    """Builds the error raised when a call does not fit the traced signature."""

    def __init__(self, signature: str):
        self.signature = signature

    def __call__(self, where, value, expected, rank):
        seen = _describe(value)
        head = f"traced {self.signature}: argument '{where}'"
        if rank == "const":
            raise ValueError(f"{head} was traced as the constant {expected!r} and the trace depends on it; "
                             f"got {seen}. Trace again to use another value.")
        if rank == "container":
            raise TypeError(f"{head} should be {expected}; got {seen}")
        if isinstance(value, torch.Tensor) and isinstance(rank, int):
            raise ValueError(f"{head} should be a Tensor with {rank} dimensions (the trace fixed the number "
                             f"of dimensions); got a Tensor of shape {tuple(value.shape)}")
        raise TypeError(f"{head} should be a {expected}"
                        f"{f' with {rank} dimensions' if isinstance(rank, int) else ''}; got {seen}")


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype})"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of length {len(value)}"
    if isinstance(value, dict):
        return f"dict with keys {sorted(map(str, value))}"
    return f"{type(value).__name__} {value!r}"


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


def compile_method(graph: Graph, name: str, label: str, guards: bool, display: str | None = None):
    sig = signature_text(display or name, graph)
    mark_inplace_reuse(graph)
    src, globs = generate(graph, name, guards=guards, input_error=InputError(sig))
    fn = compile_function(src, name, globs, label)
    fn.graph = graph
    fn.code = src
    fn.signature = sig
    return fn


def call_checked(fn, signature: str, args, kwargs):
    """Call a generated function; turn a Python arity error at the call itself into a clear TypeError."""
    try:
        return fn(*args, **kwargs)
    except TypeError as e:
        tb = e.__traceback__
        if tb is not None and tb.tb_next is None:
            kw = f"keyword arguments {sorted(kwargs)}" if kwargs else "no keyword arguments"
            raise TypeError(f"traced {signature} was called with {len(args)} positional argument(s) and "
                            f"{kw}: {e}") from None
        raise


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

    def __call__(self, *args, **kwargs):
        return call_checked(types.MethodType(self._fn, self), self._fn.signature, args, kwargs)

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

    def _switch_mode(self, name: str):
        """The training flag differs from the trace's: install a trace made in this mode.

        Dropout, BatchNorm and any ``if self.training`` take other paths in the other mode, so
        the old trace would silently compute the wrong thing. A trace of the new mode is made
        once from the original module and the stored example inputs, then reused.
        """
        mode = self.training
        variant = self._variants.get(mode)
        if variant is None:
            if self._retrace is None:
                traced_mode = "train" if not mode else "eval"
                raise GuardError(
                    f"{self.original_name} was traced in {traced_mode} mode, and tracing fixed the training "
                    f"flag; it is now in {'train' if mode else 'eval'} mode. Switch it back with "
                    f"{'.eval()' if mode else '.train()'}, or trace it again in this mode (retracing needs "
                    "the original module and _store_inputs=True).")
            variant = self._retrace(mode, self)
            self._variants[mode] = variant
        for path, methods in variant.items():
            target = self.get_submodule(path) if path else self
            for mname, fn in methods.items():
                target._install(mname, fn)
        return getattr(self, name)

    def _get_name(self) -> str:
        return self.original_name

    def extra_repr(self) -> str:
        return f"original_name={self.original_name}"

    def _install(self, name: str, fn) -> None:
        self._traced_methods[name] = fn
        object.__setattr__(self, name, types.MethodType(fn, self))

    def forward(self, *args, **kwargs):  # replaced per instance by _install
        raise RuntimeError(f"{self.original_name} was not called while tracing, so it has no traced forward")

    def __call__(self, *args, **kwargs):
        if self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or self._backward_pre_hooks:
            return super().__call__(*args, **kwargs)
        fn = self._traced_methods.get("forward")
        if fn is None:
            return self.forward(*args, **kwargs)
        return call_checked(self.forward, fn.signature, args, kwargs)

    @property
    def graph(self) -> Graph:
        return self._method("forward").graph

    @property
    def code(self) -> str:
        return self._method("forward").code

    @property
    def inlined_graph(self) -> Graph:
        return inline_calls(self._method("forward").graph)

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
            tm._modules[name] = None if child is None else mirror(child, f"{path}.{name}" if path else name)
        for mname, fn in compiled.get(path, {}).items():
            tm._install(mname, fn)
        return tm

    root = mirror(original, "")
    root._variants[original.training] = compiled
    return root
