"""The traced program as plain, immutable data: what ``trace`` records and what tools read.

A ``Program`` says everything a traced object runs, and nothing about how it runs it: the module tree
(types, training flags, the parameter and buffer tensors, children), each module's methods as graphs,
the later specializations of the methods users call, and the ledger of what the trace froze. The
runtime (runtime/program_of.py, runtime/assemble.py) compiles a Program into the objects users call
and gives it back (``traced.program``, ``runtime.traced.program_of(traced)``); save, the CLI and migrate read
and write Programs, never the compiled methods.

The records are frozen (records.py) and their collections are tuples; the graphs and tensors they hold are the
traced object's own (shared, not copied): no pass or tool may mutate them (passes copy:
tests/codegen/test_ir_untouched.py).

>>> import torch, tracejit
>>> p = tracejit.trace(torch.nn.Linear(2, 3), torch.ones(1, 2)).program
>>> p.kind, p.name, p.entry_points, [n for n, _ in p.root.parameters]
('module', 'Linear', ('forward',), ['weight', 'bias'])
>>> p.graph("forward") is p.root.method("forward")
True
"""
from __future__ import annotations

from .ir import Graph
from .records import FrozenRecord


class ModuleEntry(FrozenRecord):
    """One module of the tree, stored once however many parents share it.

    ``path``: its first path below the root ("" for the root), in ``named_modules`` order;
    ``parameters`` / ``buffers``: ``(name, tensor or None)`` in state_dict order; ``non_persistent``:
    the buffers a state_dict leaves out; ``children``: ``(name, path of the child's entry or None)``;
    ``methods``: ``(name, Graph)`` of its traced methods (each one's first trace)."""
    __slots__ = _fields = ("path", "type_name", "training", "parameters", "buffers", "non_persistent", "children",
                           "methods")

    def __init__(self, path: str, type_name: str, training: bool, parameters: tuple = (), buffers: tuple = (),
                 non_persistent: frozenset = frozenset(), children: tuple = (), methods: tuple = ()):
        self._set_fields(path, type_name, training, parameters, buffers, non_persistent, children, methods)

    def method(self, name: str) -> Graph:
        for n, g in self.methods:
            if n == name:
                return g
        raise KeyError(f"module {self.path or '(root)'} ({self.type_name}) has no traced method {name!r}; "
                       f"it has {[n for n, _ in self.methods]}")

    @property
    def method_names(self) -> tuple:
        return tuple(n for n, _ in self.methods)


class SpecializationEntry(FrozenRecord):
    """A later trace of an entry point, made when a guard of the earlier ones failed: its graph has its
    submodule calls inlined; ``reason``: the failed guard, ``source``: its line (a SourceLoc or None)."""
    __slots__ = _fields = ("method", "graph", "reason", "source")

    def __init__(self, method: str, graph: Graph, reason: str, source: object = None):
        self._set_fields(method, graph, reason, source)


class Program(FrozenRecord):
    """A traced function (``kind == "function"``: one module entry, the root, holding ``forward`` and no
    tensors) or module (``"module"``). ``entry_points``: the methods users call (the root's traced methods:
    guards at entry, specializations); ``specializations``: the later ones, oldest first; ``ledger``: the
    trace's LedgerEntry records (trace/ledger.py)."""
    __slots__ = _fields = ("kind", "name", "modules", "entry_points", "specializations", "ledger")

    def __init__(self, kind: str, name: str, modules: tuple, entry_points: tuple = ("forward",),
                 specializations: tuple = (), ledger: tuple = ()):
        if kind not in ("function", "module"):
            raise ValueError(f"Program.kind must be 'function' or 'module'; got {kind!r}")
        if not modules or modules[0].path != "":
            raise ValueError("a Program's first module entry must be the root (path '')")
        paths = [m.path for m in modules]
        if len(set(paths)) != len(paths):
            raise ValueError(f"a Program describes a module path twice: {paths}")
        self._set_fields(kind, name, modules, entry_points, specializations, ledger)
        missing = [m for m in self.entry_points if m not in self.modules[0].method_names]
        if missing:
            raise ValueError(f"entry points {missing} are not methods of the root "
                             f"(it has {list(self.modules[0].method_names)})")

    @property
    def root(self) -> ModuleEntry:
        return self.modules[0]

    @property
    def training(self) -> bool:
        """The root's training flag when traced (a guard at each entry point checks it)."""
        return self.root.training

    def module(self, path: str) -> ModuleEntry:
        for m in self.modules:
            if m.path == path:
                return m
        raise KeyError(f"the program has no module at {path!r}")

    def graph(self, method: str = "forward") -> Graph:
        """The first trace of entry point ``method``."""
        return self.root.method(method)

    def in_spec(self, method: str = "forward"):
        """The input structure of ``method``: ``((args...), {kwargs...})`` as a pytree spec."""
        return self.graph(method).in_spec

    def out_spec(self, method: str = "forward"):
        """The output structure of ``method`` (tuples, lists, dicts, dataclasses of its outputs)."""
        return self.graph(method).out_spec

    def graphs(self):
        """Every ``(path, method, Graph)``: each module's methods, root first, then the specializations
        (as ``("", "forward#2", graph)``, numbered from 2 as a call tries them after the first)."""
        for m in self.modules:
            for name, g in m.methods:
                yield m.path, name, g
        count: dict = {}
        for s in self.specializations:
            count[s.method] = count.get(s.method, 1) + 1
            yield "", f"{s.method}#{count[s.method]}", s.graph


def of_module(original, methods: dict, entry_points: tuple, ledger=(), name: str | None = None) -> Program:
    """The Program of a trace of ``original`` (an nn.Module): its tree as ``named_modules`` walks it (a
    shared module once, at its first path; a child set to None left out, as torch.jit does), the very
    same parameter and buffer tensors, and ``methods``: ``{path: {method: Graph}}`` (the root's entry
    points among them)."""
    first_path: dict[int, str] = {}
    found = []
    for path, m in original.named_modules():
        first_path[id(m)] = path
        found.append((path, m))
    entries = tuple(
        ModuleEntry(path, type(m).__name__, bool(m.training), tuple(m._parameters.items()), tuple(m._buffers.items()),
                    frozenset(m._non_persistent_buffers_set),
                    tuple((n, first_path[id(c)]) for n, c in m._modules.items() if c is not None),
                    tuple(methods.get(path, {}).items()))
        for path, m in found)
    return Program("module", name or type(original).__name__, entries, tuple(entry_points), (), tuple(ledger))


def of_function(name: str, graph: Graph, ledger=()) -> Program:
    """The Program of a traced function: one root entry holding ``forward``."""
    return Program("function", name, (ModuleEntry("", name, False, methods=(("forward", graph),)),), ("forward",),
                   (), tuple(ledger))
