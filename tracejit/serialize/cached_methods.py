"""A loaded program's compiled methods as plain data, and back (the code cache's entries: code_cache.py).

``Recorder`` compiles as the loader always does (runtime/method_compiler.compile_method) and writes down, for
each function, its code object and a *recipe* for each of its globals: where the object comes from in the
graph it was compiled from (``("constant", 3)``: the graph's constant 3; ``("spec_type", "out", (0,))``: the
class of the output's first child; a submodule call's input structure likewise), or a name among the few
objects of tracejit and torch that generated code calls (``NAMED``). A global no recipe describes makes the
whole program uncacheable (default-deny): it is then compiled at every load, as before.

``Replayer`` makes the same functions from those entries and the graphs of this load, in the same order,
without generating or compiling code. An entry that does not match the call it answers (another method, graph
size or label), or whose graph this process decodes otherwise (``_assumed``: the classes of the outputs, the
custom ops registered), raises ``Mismatch``: the loader then loads the file again without the cache.

>>> import torch, tracejit
>>> from tracejit.serialize.cached_methods import Recorder, Replayer
>>> rec = Recorder()
>>> f = tracejit.trace(lambda x: x * 2, torch.ones(2))
>>> fn = rec(f.graph, "forward", "demo", guards=True, display="demo")
>>> rec.entries[0][0], rec.cacheable   # the call it answers: name, label, guards?, display, nodes
(('forward', 'demo', True, 'demo', 1), True)
>>> again = Replayer(rec.entries)(f.graph, "forward", "demo", guards=True, display="demo")
>>> again(None, torch.arange(3.0)), again.code == fn.code
(tensor([0., 2., 4.]), True)
"""
from __future__ import annotations

import builtins
import functools
import importlib

from ..codegen.compiler import function_from_code
from ..ir import SourceLoc
from ..ops import custom
from ..runtime.method_compiler import InputError, compile_method, finish
from ..support.call_budget import Allowance, size_check, work_count
from ..support.guards import GuardFailure
from ..lazy_module import LazyModule

size_rules = LazyModule(".size_rules", __package__)   # a program with call-time size checks only

# objects generated code names as globals that are neither the graph's nor per-function state
NAMED = (("torch", ""), ("torch", "Tensor"),
         ("tracejit.support.guards", "check_input_kind"), ("tracejit.support.guards", "plain_value"),
         ("tracejit.support.call_budget", "INT_OPS"), ("tracejit.support.call_budget", "enter_call"),
         ("tracejit.support.call_budget", "enter_root"), ("tracejit.support.read_cap", "read_cap"), ("tracejit.codegen.sym_emit", "FUNCTIONS"),
         ("tracejit.pytree", "rebuild_registered"), ("tracejit.codegen.capture_emit", "_children_of"))
_PLAIN = (type(None), bool, int, float, str)


class Mismatch(Exception):
    """A cache entry does not answer this compile call: load without the cache."""


class Recorder:
    """A ``compile(graph, name, label, guards=, display=)`` for serialize/compile_once.MethodCompiler that also
    records each function (``entries``); ``cacheable`` turns False at the first it cannot describe."""

    def __init__(self):
        self.entries: list = []
        self.cacheable = True

    def __call__(self, graph, name: str, label: str, guards: bool, display: str | None = None):
        fn = compile_method(graph, name, label, guards=guards, display=display)
        if self.cacheable:
            entry = _record(fn, graph, (name, label, guards, display, len(graph.nodes)))
            self.cacheable = entry is not None
            if entry is not None:
                self.entries.append(entry)
        return fn


class Replayer:
    """A ``compile`` that makes each function from the next recorded entry instead."""

    def __init__(self, entries):
        self.entries = entries
        self.used = 0

    def __call__(self, graph, name: str, label: str, guards: bool, display: str | None = None):
        if self.used >= len(self.entries):
            raise Mismatch("more compile calls than cached functions")
        entry = self.entries[self.used]
        self.used += 1
        if entry[0] != (name, label, guards, display, len(graph.nodes)):
            raise Mismatch(f"cached {entry[0]!r}, asked for {(name, label, guards, display, len(graph.nodes))!r}")
        return _replay(entry, graph)


def _record(fn, graph, call: tuple):
    """``(call, code, defaults, kwdefaults, source, signature, recipes, assumed)``, or None."""
    named = _named_ids()
    specs = _specs(graph)
    places = _places(graph, specs)
    recipes = []
    for k, v in fn.__globals__.items():
        if k == "__builtins__" or (k == fn.__name__ and v is fn):
            continue
        recipe = _recipe(k, v, named, places)
        if recipe is None:
            return None
        recipes.append((k, recipe))
    # a default value marshal cannot write fails the whole entry in code_cache.write (nothing is cached)
    return (call, fn.__code__, fn.__defaults__, fn.__kwdefaults__, fn.code, fn.signature, tuple(recipes),
            _assumed(graph, specs))


def _recipe(name: str, v, named: dict, places: dict):
    if name == "_input_error" and type(v) is InputError:
        return ("input_error",)
    if name == "_tj_guard" and type(v) is GuardFailure:
        at = places["nodes"]
        if not all(id(node) in at for node, _ in v.table):
            return None
        return ("guard", tuple((at[id(node)], pred) for node, pred in v.table), v.fn_name)
    if name == "_tj_line_sources" and type(v) is list:
        if not all(s is None or type(s) is SourceLoc for s in v):
            return None
        return ("sources", tuple(None if s is None else (s.filename, s.lineno, s.function) for s in v))
    made_of = getattr(v, "made_of", None)
    if name.startswith("_tj_budget") and made_of is not None:
        if made_of[0] == "work":   # support/call_budget.work_count: plain data
            return made_of if all(type(x) in _PLAIN for x in made_of) else None
        if made_of[0] == "allow":   # support/call_budget.Allowance: ints and tuples of ints
            _, work, shapes, elements, weights = made_of
            plain = type(work) is int and type(elements) is int and type(weights) is int and type(shapes) is tuple and all(
                type(s) is tuple and all(type(d) is int for d in s) for s in shapes)
            return made_of if plain else None
        op, rule, where, step = made_of
        key = _rule_keys().get(id(rule))
        return ("budget", op, key, where, step) if key is not None and _rule(key) is rule else None
    if type(v) in _PLAIN:
        return ("value", v)
    return named.get(id(v)) or places["objects"].get(id(v))


def _replay(entry, graph):
    (name, label, guards, display, _), code, defaults, kwdefaults, source, signature, recipes, assumed = entry
    specs = _specs(graph)
    if _assumed(graph, specs) != assumed:
        raise Mismatch("this process decodes the program otherwise (an output class, a custom op)")
    glob = {"__builtins__": builtins}
    for k, recipe in recipes:
        glob[k] = _make(recipe, graph, specs, signature)
    return finish(function_from_code(code, source, glob, label, code.co_name, defaults, kwdefaults), graph, source,
                  signature, guards)


def _assumed(graph, specs: dict) -> tuple:
    """What the code was generated for that this process may decode otherwise, though the file is the same:
    the structure of the inputs and outputs with the classes found for them (a class this process lacks
    decodes as a record: codegen/python.rebuild builds it otherwise), and the kept custom ops the graph calls
    that this process registers with their reviewed schema (the validator refuses the others)."""
    ops = sorted({n.op for n in graph.nodes if isinstance(n.op, str) and custom.is_kept(n.op)})
    return (tuple((tree, _spec_print(spec)) for tree, spec in specs.items()),
            tuple((op, custom.registered(op.split(".")[0])) for op in ops))


def _specs(graph) -> dict:
    """The input and output structures generated code builds or takes apart: the graph's own, and the inputs of
    each submodule method it calls (an OrderedDict of features handed to torchvision's FPN), by a plain-data
    name."""
    out = {"in": graph.in_spec, "out": graph.out_spec}
    for (path, method), callee in sorted(graph.callees.items()):
        out[("callee", path, method)] = callee.in_spec
    return out


def _spec_print(spec) -> tuple:
    t = spec.type
    kind = None if t is None else (getattr(t, "__module__", ""), getattr(t, "__qualname__", ""),
                                   hasattr(t, "__dataclass_fields__"))
    keys = tuple(k if type(k) in _PLAIN else repr(k) for k in spec.keys)
    return (spec.kind, kind, keys, tuple(_spec_print(c) for c in spec.children))


def _make(recipe, graph, specs: dict, signature: str):
    kind = recipe[0]
    if kind == "value":
        return recipe[1]
    if kind == "named":
        module = importlib.import_module(recipe[1])
        return getattr(module, recipe[2]) if recipe[2] else module
    if kind == "constant":
        return graph.constants[recipe[1]]
    if kind in ("spec", "spec_type"):
        spec = specs[recipe[1]]
        for i in recipe[2]:
            spec = spec.children[i]
        return spec if kind == "spec" else spec.type
    if kind == "input_error":
        return InputError(signature)
    if kind == "guard":
        return GuardFailure([(graph.nodes[i], pred) for i, pred in recipe[1]], recipe[2])
    if kind == "sources":
        return [None if s is None else SourceLoc(*s) for s in recipe[1]]
    if kind == "budget":
        _, op, key, where, step = recipe
        rule = _rule(key)
        if rule is None:
            raise Mismatch(f"no size rule {key!r}")
        return _one(graph)(size_check, op, rule, graph.call_budget.file_elements, where, step)
    if kind == "allow":
        _, work, shapes, elements, weights = recipe
        return Allowance(work, tuple(tuple(s) for s in shapes), elements, weights)
    if kind == "work":
        _, op, step, where, fixed, broadcast = recipe
        return _one(graph)(work_count, op, step, graph.call_budget.file_elements, where, fixed, broadcast)
    raise Mismatch(f"unknown recipe {kind!r}")


def _one(graph):
    """The plan's maker of one check per distinct arguments (budget_plan.BudgetPlan._one), else a plain call."""
    return getattr(graph.call_budget, "_one", None) or (lambda make, *args: make(*args))


def _places(graph, specs: dict) -> dict:
    """``{"nodes": {id(node): index}, "objects": {id(obj): recipe}}`` for the graph's constants and the specs
    (and their classes) of its inputs and outputs."""
    objects = {}
    for i, c in enumerate(graph.constants or ()):
        objects.setdefault(id(c), ("constant", i))

    def walk(spec, tree: str, path: tuple):
        objects.setdefault(id(spec), ("spec", tree, path))
        if spec.type is not None:
            objects.setdefault(id(spec.type), ("spec_type", tree, path))
        for i, child in enumerate(spec.children):
            walk(child, tree, path + (i,))

    for tree, spec in specs.items():
        walk(spec, tree, ())
    return {"nodes": {id(n): i for i, n in enumerate(graph.nodes)}, "objects": objects}


@functools.cache
def _named_ids() -> dict:
    out = {}
    for module, attr in NAMED:
        m = importlib.import_module(module)
        out[id(getattr(m, attr) if attr else m)] = ("named", module, attr)
    return out


@functools.cache
def _rule_keys() -> dict:
    """``{id(rule): (table, name)}`` over size_rules' tables (a hint: ``_recipe`` checks ``_rule(key) is rule``)."""
    out = {id(size_rules.SEVERAL_TENSORS): ("several", "")}
    for table in ("RULES", "CUSTOM_RULES", "PIECES", "TRUNC_DIVISION"):
        for key, rule in getattr(size_rules, table).items():
            out.setdefault(id(rule), (table, key))
    return out


def _rule(key: tuple):
    table, name = key
    return size_rules.SEVERAL_TENSORS if table == "several" else getattr(size_rules, table).get(name)
