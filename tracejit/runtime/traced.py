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
from ..program import Program
from . import specialize
from .calling import call_checked, spread_positional  # noqa: F401  (importers read them here too)
from .method_compiler import InputError, compile_method, signature_text  # noqa: F401  (likewise)
from .undo import undoable_call
from . import late_hooks
from ..support.module_hooks import any_registered
from ..lazy_module import LazyModule

# a server that loads and calls a program imports none of these (issue #22 item 4)
_inline = LazyModule("..passes.inline", __package__)   # .inlined_graph
_constants = LazyModule(".constants", __package__)   # .to() / .cuda(): the captured constants move too
_program_of = LazyModule(".program_of", __package__)   # .program, save, migrate, the viewer


class _TracedProgram:
    """What TracedFunction and TracedModule share: the first trace's graph and code, the specializations
    chosen per call, the Program (plain data, tracejit/program.py) and the guarded call itself.
    Each class says where its compiled methods are (``_method``)."""

    def _method(self, name: str):
        raise NotImplementedError

    @property
    def graph(self) -> Graph:
        return self._method("forward").graph

    @property
    def code(self) -> str:
        return self._method("forward").code

    @property
    def code_with_constants(self):
        return code_with_constants(self.code, self.graph)

    @property
    def specializations(self) -> list:
        """Every trace of ``forward`` this object chooses from per call, newest first, the first trace
        last (see runtime/specialize.py)."""
        spec_set = specialize.sets_of(self).get("forward")
        return list(spec_set.entries) if spec_set is not None else []

    @property
    def _specializations(self):
        return specialize.sets_of(self).get("forward")

    def drop_original(self) -> None:
        """Release the original: a failed guard then raises GuardError instead of retracing."""
        specialize.drop_original(self)

    def _call_first(self, fn, bound, args, kwargs):
        """Run the first trace ``fn`` (``bound``: it bound to this object); a failed guard or a left-out
        input chooses another specialization (runtime/specialize.py)."""
        try:
            checks = getattr(fn, "memory_checks", None)   # Python state held beside the graph (method_compiler.py)
            if checks is not None and checks.changed():   # (the label only for the error)
                checks.fail(self._label())
            if getattr(fn, "undo", None) is None:   # the common case: nothing to put back if a guard fails
                return call_checked(bound, fn.signature, args, kwargs, fn.graph)
            return undoable_call(fn, self, args, kwargs)
        except GuardError as e:
            return specialize.on_guard_failure(self, e, args, kwargs)
        except ArgumentTypeError as e:   # an input left out: a specialization traced without it
            return specialize.on_argument_error(self, e, args, kwargs)

    def _label(self) -> str:
        return f"{getattr(self, 'original_name', None) or self.__name__}.forward"

    def _run(self, args, kwargs):   # the first trace only: the checker reports a failed guard
        return undoable_call(self._method("forward"), self, args, kwargs)


class TracedFunction(_TracedProgram):
    """A traced plain function. Call it like the original.

    >>> import torch, tracejit
    >>> f = tracejit.trace(lambda x, y: 2 * x + y, (torch.ones(3), torch.ones(3)))
    >>> f(torch.zeros(2), torch.ones(2))
    tensor([1., 1.])
    """

    def __init__(self, name: str, graph: Graph, ledger, compile=None):
        self.__name__ = name
        if compile is None:
            self._fn = compile_method(graph, "forward", name, guards=True, display=name)
        else:   # a loaded program's (serialize/compile_once.MethodCompiler.entry_point)
            self._fn = compile(graph, "forward", name, display=name)
        self.ledger = tuple(ledger)

    def _method(self, name: str):
        if name != "forward":
            raise AttributeError(f"a traced function has one method, 'forward'; not {name!r}")
        return self._fn

    @property
    def inlined_graph(self) -> Graph:
        return self._fn.graph

    @property
    def signature(self) -> str:
        return self._fn.signature

    @property
    def original_name(self) -> str:
        return self.__name__

    @property
    def program(self) -> Program:
        """This function's Program: its graph, specializations and ledger as plain data."""
        return _program_of.function_program(self)

    def __call__(self, *args, **kwargs):
        fn = self._fn
        if any_registered():   # a global module hook: the trace decides whether its code runs it
            late_hooks.check_global(self, fn.graph)
        return self._call_first(fn, types.MethodType(fn, self), args, kwargs)

    def __repr__(self) -> str:
        return f"<TracedFunction {self._fn.signature}>"


class TracedModule(_TracedProgram, nn.Module):
    """A traced nn.Module: same submodules, parameters and buffers as the original
    (the very same tensors), with each traced method replaced by generated code.
    """

    def __init__(self, original_name: str):
        super().__init__()
        # plain attributes, none a tensor or module: straight into __dict__, past nn.Module.__setattr__'s
        # checks (a load builds one TracedModule per submodule: bench/fresh_load.py)
        self.__dict__.update(
            original_name=original_name,
            _traced_methods={},       # method name -> generated function
            ledger=(),
            _traced_variants={},      # training flag -> {path: {method: fn}} (root only)
            _traced_retrace=None,     # training flag -> {path: {method: fn}}, or None
            _traced_float64=None,     # traced module -> float64 copy of the original, or None (api.py)
            _hook_seen=late_hooks.Seen())   # the hook registrations its last check saw (late_hooks.py)

    def _get_name(self) -> str:
        return self.original_name

    def __getattr__(self, name: str):
        settings = self.__dict__.get("_original_settings")   # the original's scalar attributes (module_config.py)
        if settings is not None and name in settings:
            return settings[name]
        return super().__getattr__(name)

    def __setattr__(self, name: str, value) -> None:
        settings = self.__dict__.get("_original_settings")
        if settings is not None and name in settings and name not in self.__dict__:
            raise AttributeError(
                f"`{name}` of the traced {self.original_name} was {settings[name]!r} when it was traced, and the traced "
                f"program holds that value: setting it here would change nothing. Set it on the original module (the "
                f"traced program follows the original's settings while it keeps it), or trace again")
        super().__setattr__(name, value)

    # each registration is counted: a traced parent's next call checks its submodules (late_hooks.py)
    def register_forward_pre_hook(self, *args, **kwargs):
        return late_hooks.registered(super().register_forward_pre_hook(*args, **kwargs))

    def register_forward_hook(self, *args, **kwargs):
        return late_hooks.registered(super().register_forward_hook(*args, **kwargs))

    def register_full_backward_pre_hook(self, *args, **kwargs):
        return late_hooks.registered(super().register_full_backward_pre_hook(*args, **kwargs))

    def register_full_backward_hook(self, *args, **kwargs):
        return late_hooks.registered(super().register_full_backward_hook(*args, **kwargs))

    def register_backward_hook(self, *args, **kwargs):
        return late_hooks.registered(super().register_backward_hook(*args, **kwargs))

    def _apply(self, fn, *args, **kwargs):
        result = super()._apply(fn, *args, **kwargs)
        _constants.move_constants(self, fn)   # tensors captured as constants move with the parameters
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
        raise RuntimeError(f"{self.original_name} has no traced forward of its own: it was not called while tracing, "
                           "or its call was traced through into its caller's graph (a tensor it computed reached the "
                           "caller another way than its return value, or its inputs or outputs hold objects tracejit "
                           "cannot flatten); call the traced module that holds it (torch.jit's traced submodules "
                           "cannot be called either)")

    def __call__(self, *args, **kwargs):
        seen = self.__dict__.get("_hook_seen")
        if seen is None or seen.epoch != late_hooks.EPOCH[0]:   # a hook was registered on a traced module
            late_hooks.check(self)
        if any_registered() and "forward" in self._traced_methods:   # a global module hook (late_hooks.py)
            late_hooks.check_global(self, self._traced_methods["forward"].graph)
        if self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or self._backward_pre_hooks:
            return super().__call__(*args, **kwargs)
        fn = self._traced_methods.get("forward")
        if fn is None:
            return self.forward(*args, **kwargs)
        return self._call_first(fn, self.forward, args, kwargs)

    @property
    def program(self) -> Program:
        """This module's Program: module tree, tensors, graphs, specializations, ledger as plain data.
        (A submodule, parameter or buffer the original named ``program`` keeps the name: then use
        ``tracejit.runtime.traced.program_of``.)"""
        for own in (self._modules, self._parameters, self._buffers):
            if "program" in own:
                return own["program"]
        return _program_of.module_program(self, TracedModule)

    @property
    def method_graphs(self) -> types.MappingProxyType:
        """``{method: Graph}`` of this module's own traced methods (each one's first trace), read-only:
        what serialize, export, the viewer and the CLI read instead of the compiled methods."""
        return types.MappingProxyType({name: fn.graph for name, fn in self._traced_methods.items()})

    @property
    def inlined_graph(self) -> Graph:
        return _inline.inline_calls(self._method("forward").graph)

    def _method(self, name: str):
        fn = self._traced_methods.get(name)
        if fn is None:
            raise AttributeError(f"{self.original_name} has no traced method {name!r} (it was not called "
                                 "while tracing)")
        return fn


def program_of(obj) -> Program:
    """The Program (plain data, tracejit/program.py) of a TracedFunction or TracedModule; a TypeError for
    anything else (and for a module tree holding a module that is not traced)."""
    if isinstance(obj, TracedFunction):
        return _program_of.function_program(obj)
    if isinstance(obj, TracedModule):
        return _program_of.module_program(obj, TracedModule)
    raise TypeError(f"expected a TracedFunction or TracedModule (from tracejit.trace); got {type(obj).__name__}")


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
