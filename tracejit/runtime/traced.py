"""TracedFunction and TracedModule: what trace() returns.

Each traced method is a generated Python function (see ``.code``), compiled
once; calling the traced object calls it directly. ``.save`` and ``.to_html`` are added by the top
layer (tracejit/user_methods.py): the runtime imports neither serialize nor the viewer.
"""
from __future__ import annotations

import types

from torch import nn

from ..errors import ArgumentTypeError, GuardError
from ..ir import Graph
from ..passes.inline import inline_calls
from . import specialize
from .calling import call_checked, spread_positional  # noqa: F401  (importers read them here too)
from .constants import move_constants
from .method_compiler import InputError, compile_method, signature_text  # noqa: F401  (likewise)
from .undo import undoable_call


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

    def __call__(self, *args, **kwargs):
        fn = self._fn
        try:
            if getattr(fn, "undo", None) is None:   # the common case: nothing to put back if a guard fails
                return call_checked(types.MethodType(fn, self), fn.signature, args, kwargs, fn.graph)
            return undoable_call(fn, self, args, kwargs)
        except GuardError as e:
            return specialize.on_guard_failure(self, e, args, kwargs)
        except ArgumentTypeError as e:   # an input left out: a specialization traced without it
            return specialize.on_argument_error(self, e, args, kwargs)

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
        except ArgumentTypeError as e:   # an input left out: a specialization traced without it
            return specialize.on_argument_error(self, e, args, kwargs)

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
    def method_graphs(self) -> types.MappingProxyType:
        """``{method: Graph}`` of this module's own traced methods (each one's first trace), read-only:
        what serialize, export, the viewer and the CLI read instead of the compiled methods."""
        return types.MappingProxyType({name: fn.graph for name, fn in self._traced_methods.items()})

    @property
    def code(self) -> str:
        return self._method("forward").code

    @property
    def inlined_graph(self) -> Graph:
        return inline_calls(self._method("forward").graph)

    @property
    def code_with_constants(self):
        return code_with_constants(self.code, self.graph)

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
