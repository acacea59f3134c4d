r"""Module-level globals the user's code read while tracing become ``global`` guards.

A traced program holds the values forward computed from a global (``x * SCALE``, ``if USE_BIAS:``,
``torch.zeros(SIZES[0])``); eager reads the global again at every call. outer_state.py already looks at every
user function forward calls (not torch's, tracejit's, the standard library's or an installed package's) and
remembers the globals its code names. Of those, each one the code loads as a global (``LOAD_GLOBAL``, not an
attribute that happens to share the name) whose value is plain data (support/global_guards.py: numbers,
strings, None, small tuples / lists / dicts / sets of them) gets a guard, first in the root method's graph, that
compares the global's value at call time with the traced one: a live program traces again when it changed
(eager's answer), an optimized one built from a loaded file raises GuardError naming the line that read it.

Plain data read off a global through the user's own modules and classes (``settings.SCALE``,
``Defaults.EPS``, ``settings.Defaults.EPS``: a chain of ``LOAD_ATTR`` after the global, each step a module or
class of the user's files, the value in its own ``__dict__``) is guarded the same way (attribute ``owner``: the
class's qualified name).

Also guarded the same way, each with its namespace held in memory (attribute ``space``): globals of code run by
``exec`` with a dict of its own (and code without a file: ``<string>``, ``<stdin>``, a notebook cell, which
frame_returns.py now counts as the user's), plain class attributes read through an object or a class and
inherited (``self.EPS`` / ``B.EPS`` defined on a base class: unbound on the object and on each class before the
one defining it, its value there), the plain data in the traced function's closure cells, the plain attributes
of config objects the modules or read globals hold (support/object_checks.py), and the plain attributes of the
user's own module classes that the user's code reads by name (``self.eps``; on the original module).

Not guarded: globals forward itself changes (outer_state.py refuses those), tensors (captures), modules,
functions and classes (code), other objects, containers over ``MAX_ITEMS`` items, and everything with
``allow_frozen_python_state=True`` (the caller accepts the values the trace froze). A saved file keeps no
``global`` guard: it is loaded where the user's modules need not exist (serialize/encode.py); the ledger keeps
what each global was.

>>> import sys, types, warnings, torch, tracejit
>>> settings = sys.modules["settings"] = types.ModuleType("settings")   # a module of the user's
>>> exec(compile("SCALE = 2.0\ndef scaled(x):\n    return x * SCALE", "settings.py", "exec"), settings.__dict__)
>>> traced = tracejit.trace(settings.scaled, torch.ones(2))
>>> [(n.attrs["name"], n.attrs["expected"]) for n in traced.graph.nodes if n.attrs.get("kind") == "global"]
[('SCALE', ['float', 2.0])]
>>> settings.SCALE = 3.0
>>> with warnings.catch_warnings(record=True):   # the guard fails: traced again, eager's answer
...     traced(torch.ones(2))
tensor([3., 3.])
"""
from __future__ import annotations

import dis
import linecache
import os
import reprlib
import sys
import types
from functools import lru_cache

import torch

from ..ir import GUARD, Node, SourceLoc
from ..support import object_checks
from ..support.module_hooks import any_registered
from ..support.global_guards import COUNT, UNBOUND, global_value, guardable
from . import global_hooks
from .python_state import MUTATING_METHODS as _MUTATORS
from .frame_returns import _is_user
from .outer_state import _installed_library

KIND = "global"
_MUTABLE = (list, dict, set)
MAX_CHAIN = 4   # attributes followed off a global: settings.models.Defaults.EPS


@lru_cache(maxsize=4096)
def _loads(code) -> tuple:
    """``({name: line}, {(name, attribute, ...): line})``: the first line at which ``code`` loads each global
    (``LOAD_GLOBAL``; ``LOAD_NAME`` in a class body), and each chain of attributes read off a global
    (``settings.SCALE``, ``Defaults.EPS``, ``settings.Defaults.EPS``: the global, then ``LOAD_ATTR``s)."""
    names: dict = {}
    chains: dict = {}
    chain = None
    for ins in dis.get_instructions(code):
        if ins.opname == "CACHE":
            continue
        line = (ins.positions.lineno if ins.positions is not None else None) or code.co_firstlineno
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
            names.setdefault(ins.argval, line)
            chain = (ins.argval,)
        elif ins.opname == "LOAD_ATTR" and chain is not None and len(chain) <= MAX_CHAIN:
            chain += (ins.argval,)
            chains.setdefault(chain, line)
        else:
            chain = None
    return names, chains


def _global_loads(code) -> dict:
    return _loads(code)[0]


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def _short(value) -> str:
    return _REPR.repr(value)


def _module_of(g: dict) -> str | None:
    name = g.get("__name__")
    mod = sys.modules.get(name) if isinstance(name, str) else None
    return name if mod is not None and getattr(mod, "__dict__", None) is g else None


def _user_module(obj) -> bool:
    """Is ``obj`` a module of the user's own code, imported under its name (``import settings``)?"""
    file = getattr(obj, "__file__", None)
    return isinstance(obj, types.ModuleType) and isinstance(file, str) and sys.modules.get(obj.__name__) is obj \
        and _is_user(file) and not _installed_library(file)


def _user_class(obj) -> bool:
    """Is ``obj`` a class the user's own module defines at its top level (found again by module and name)?"""
    if not isinstance(obj, type) or "<" in obj.__qualname__:
        return False
    module = sys.modules.get(obj.__module__)
    return module is not None and _user_module(module) and getattr(module, obj.__qualname__, None) is obj


def _guard(key, expected, value, what: str, code, line: int, **where) -> tuple:
    loc = SourceLoc(code.co_filename, line, code.co_name)
    return key, Node(GUARD, "", (), attrs={
        "kind": KIND, "test": KIND, "expected": expected, "seen": expected, **where,
        "what": f"{what} was {_short(value)} when traced", "line": linecache.getline(code.co_filename, line).strip()},
        source=loc, effectful=True)


def _attribute_guards(outer):
    """Guards on plain data read off a user module or class named by a global (``settings.SCALE``)."""
    for code, g in outer.forward_codes.items():
        for chain, line in _loads(code)[1].items():
            obj, attr = g.get(chain[0]), chain[-1]
            for step in chain[1:-1]:   # through user modules and classes only (no property runs here)
                obj = vars(obj).get(step) if _user_module(obj) or _user_class(obj) else None
            if attr.startswith("__") or not (_user_module(obj) or _user_class(obj)):
                continue
            holder = ".".join(chain[:-1])
            space = vars(obj)
            if isinstance(obj, type) and attr not in space:   # inherited: ``B.EPS`` defined on a base class
                yield from _inherited(obj, attr, f"`{holder}.{attr}`", code, line)
                continue
            expected = guardable(space[attr]) if attr in space else None
            if expected is None:
                continue
            if isinstance(obj, type):
                yield _guard((obj.__module__, obj.__qualname__, attr), expected, space[attr],
                             f"class attribute `{obj.__qualname__}.{attr}`", code, line, module=obj.__module__,
                             owner=obj.__qualname__, name=attr)
            else:
                yield _guard((obj.__name__, "", attr), expected, space[attr], f"`{holder}.{attr}` (module "
                             f"{obj.__name__})", code, line, module=obj.__name__, name=attr)


def _inherited(cls: type, attr: str, what: str, code, line: int):
    """Guards for a class attribute ``cls`` inherits: unbound in each class of its MRO before the one defining
    it (a later ``B.EPS = ...`` shadows it), its value there; nothing unless all of those are the user's classes
    and the value is plain data."""
    chain = []
    for c in cls.__mro__:
        if c is object or not _user_class_anywhere(c):
            return
        if attr in vars(c):
            expected = guardable(vars(c)[attr])
            if expected is None:
                return
            chain.append((c, expected))
            break
        chain.append((c, UNBOUND))
    else:
        return
    for c, expected in chain:
        value = vars(c).get(attr, "unbound")
        yield _guard((f"~{c.__module__}.{c.__qualname__}", "", attr), expected, value,
                     f"{what} (class attribute of {c.__qualname__})", code, line, space=vars(c), owner=c.__qualname__,
                     name=attr)


def _user_class_anywhere(cls: type) -> bool:
    """Is ``cls`` a class of the user's own code (its module a user file, not an installed package)?"""
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and _is_user(file) and not _installed_library(file)


_MODULE_BOOKKEEPING = frozenset(vars(torch.nn.Module()))   # _parameters, _forward_hooks, ...: not settings


def _module_attribute_guards(m, path: str, loads: dict):
    """Guards on the plain attributes of a module of the user's own class that the user's code reads by name
    (``self.eps``, ``self.sizes``, ``self.cfg["k"]``: ``loads``), on the original module: a traced object traces
    its original again when one changed (torch's and installed libraries' modules, nn.Module's own bookkeeping and
    the training flag, which has guards of its own, are left out). A private name counts (hunt29: ``self._k`` or
    torchvision's ``self._post_nms_top_n["testing"]`` changed after the trace was frozen, silently); one forward
    writes is not in ``loads``."""
    if not _user_class_anywhere(type(m)):
        return
    space = vars(m)
    for attr, value in list(space.items()):
        if attr in _MODULE_BOOKKEEPING or attr.startswith("__") or attr == "training" or attr not in loads:
            continue
        expected = guardable(value)
        if expected is not None:
            code, line = loads[attr]
            yield _guard((f"~{path}#{id(m)}", "", attr), expected, value, f"`{path or 'self'}.{attr}` (an attribute "
                         f"of the module {type(m).__name__})", code, line, space=space, owner=path or "self", name=attr)


def _class_attribute_guards(obj, path: str, loads: dict, by_type: dict):
    """Guards on the class attributes forward may read through ``obj`` (``self.EPS`` defined on its class or a
    base class): every attribute name the user's code reads (``loads``: name -> (code, line)) that ``obj``'s own
    ``__dict__`` does not hold. ``by_type``: the names each class defines along its MRO, found once per class."""
    cls = type(obj)
    names = by_type.get(cls)
    if names is None:
        names = by_type[cls] = [a for a in loads if not a.startswith("__") and any(a in vars(c) for c in cls.__mro__
                                                                                   if c is not object)] \
            if _user_class_anywhere(cls) else []
    own = object_checks.namespace_of(obj)
    for attr in names:
        code, line = loads[attr]
        if attr in own:
            continue
        if isinstance(obj, torch.nn.Module) and any(attr in vars(obj).get(t, ()) for t in
                                                     ("_parameters", "_buffers", "_modules")):
            continue
        what = f"`{path}.{attr}`" if path else f"`self.{attr}`"
        chain = list(_inherited(cls, attr, what, code, line))
        if chain:   # and not set on the object itself since (it would shadow the class's)
            yield _guard((f"~{path}#{id(obj)}", "", attr), UNBOUND, "unbound", f"{what} (not on the object itself)",
                         code, line, space=own, owner=path or "self", name=attr)
            yield from chain


@lru_cache(maxsize=4096)
def _attribute_loads(code) -> dict:
    """``{attribute: line}``: the first line at which ``code`` reads each attribute name (``x.name``)."""
    out: dict = {}
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and isinstance(ins.argval, str):
            out.setdefault(ins.argval, (ins.positions.lineno if ins.positions is not None else None)
                           or code.co_firstlineno)
    return out


def _attribute_writes(code) -> set:
    """Attribute names ``code`` loads on a line that also writes into a container (``self.cache[k] = v``,
    ``del d[k]``, ``self.seen.append(n)``): a module's own state, filled by its calls (timm's LeViT fills
    ``attention_bias_cache`` in eager calls only), not configuration a user sets. Per line, so a name loaded
    beside the write counts too (leaving it unguarded, as before). A mutating method's name called on a local or
    a global (``x.sort(0)``, ``t.add(1)``: a tensor's method of the same name, hunt29) writes no attribute of this
    line; called on an attribute (``self.seen.append``), that attribute alone is written."""
    by_line: dict = {}
    previous = None
    for ins in dis.get_instructions(code):
        line = ins.positions.lineno if ins.positions is not None else None
        names, writes, receivers = by_line.setdefault(line, (set(), [False], set()))
        if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and isinstance(ins.argval, str):
            names.add(ins.argval)
            if ins.argval in _MUTATORS:
                if previous is not None and previous.opname == "LOAD_ATTR":
                    receivers.add(previous.argval)   # self.seen.append(n): `seen` is written
                elif previous is None or previous.opname not in _PLAIN_RECEIVERS:
                    writes[0] = True   # self.d[k].append(v), f().add(x): anything on the line may be written
        elif ins.opname in ("STORE_SUBSCR", "DELETE_SUBSCR"):
            writes[0] = True
        if ins.opname not in ("CACHE", "EXTENDED_ARG"):
            previous = ins
    return {n for names, writes, receivers in by_line.values() for n in (names if writes[0] else receivers)}


_PLAIN_RECEIVERS = ("LOAD_FAST", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLOSURE")   # x.sort(): no attribute


def _object_guards(module, outer):
    """Guards on the plain attributes of the config objects the modules or read globals hold
    (support/object_checks.py), each at the first line of the user's code reading an attribute of its name."""
    found = [(g, name) for g, name, _ in outer.globals_read() if name in g and guardable(g[name]) is None]
    loads, written = {}, set()
    for c in outer.forward_codes:
        for attr, line in _attribute_loads(c).items():
            loads.setdefault(attr, (c, line))
        written |= _attribute_writes(c)
    by_type: dict = {}
    read_only = {k: v for k, v in loads.items() if k not in written}
    for path, m in (module.named_modules() if module is not None else ()):
        yield from _class_attribute_guards(m, path, loads, by_type)
        yield from _module_attribute_guards(m, path, read_only)
    for path, obj in object_checks.objects(module, found):
        yield from _class_attribute_guards(obj, path, loads, by_type)
        space = object_checks.namespace_of(obj)
        if any(guardable(v) is not None for v in list(space.values())):   # a config: an attribute added since
            yield (f"~{path}", "", COUNT), Node(GUARD, "", (), attrs={   # (read with getattr / hasattr) is seen
                "kind": KIND, "test": KIND, "expected": global_value(space, COUNT), "seen": global_value(space, COUNT),
                "space": space, "owner": path, "name": COUNT, "what": f"the number of attributes of `{path}` (a "
                f"{type(obj).__name__} the traced code holds) was {len(space)} when traced", "line": ""},
                effectful=True)
        for attr, value in list(space.items()):
            expected = guardable(value)
            if expected is None or attr.startswith("__") or attr.startswith("_") and isinstance(value, _MUTABLE):
                continue   # (a private list / dict / set: a cache the object fills as it is used, by convention)
            where = loads.get(attr)
            loc = SourceLoc(where[0].co_filename, where[1], where[0].co_name) if where else None
            yield (f"~{path}", "", attr), Node(GUARD, "", (), attrs={
                "kind": KIND, "test": KIND, "expected": expected, "seen": expected, "space": space, "owner": path,
                "name": attr, "what": f"`{path}.{attr}` (of a {type(obj).__name__} the traced code holds) was "
                                      f"{_short(value)} when traced",
                "line": linecache.getline(loc.filename, loc.lineno).strip() if loc else ""}, source=loc,
                effectful=True)


def _closure_guards(fn):
    """Guards on the plain data in the closure cells of the traced function (``k = [2.0]; def f(x): return x *
    k[0]``): eager reads the cell again at every call."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None or not getattr(fn, "__closure__", None) or not _is_user(code.co_filename):
        return
    space = object_checks.CellSpace(fn)
    for name in code.co_freevars:
        if name not in space:
            continue
        expected = guardable(space[name])
        if expected is not None:
            line = _attribute_loads_free(code).get(name, code.co_firstlineno)
            yield _guard((f"~closure{id(fn)}", "", name), expected, space[name],
                         f"closure variable `{name}` of {code.co_name}", code, line, space=space,
                         owner=code.co_name, name=name)


@lru_cache(maxsize=1024)
def _attribute_loads_free(code) -> dict:
    """``{free variable: line}``: the first line at which ``code`` loads each closure variable."""
    out: dict = {}
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_DEREF" and isinstance(ins.argval, str):
            out.setdefault(ins.argval, (ins.positions.lineno if ins.positions is not None else None)
                           or code.co_firstlineno)
    return out


def guard_nodes(outer, root=None, fn=None) -> list:
    """One ``global`` guard per global read (module docstring), in (module, class, name) order, then one per plain
    attribute of each config object (support/object_checks.py), object by object."""
    found = {}
    for g, name, codes in outer.globals_read():
        if name.startswith("__"):
            continue
        reads = [(c, _global_loads(c)[name]) for c in codes if name in _global_loads(c)]
        module = _module_of(g) if reads else None
        expected = guardable(g[name]) if reads else None
        if expected is not None and module is not None:
            key, node = _guard((module, "", name), expected, g[name], f"global `{name}` of module {module}", *reads[0],
                               module=module, name=name)
            found[key] = node
        elif expected is not None:   # code run by exec with a dict of its own: that dict, held (in memory only)
            key, node = _guard((f"~{id(g)}", "", name), expected, g[name], f"global `{name}` of code run by exec "
                               f"({reads[0][0].co_filename})", *reads[0], space=g, owner="<exec globals>", name=name)
            found[key] = node
    for key, node in _attribute_guards(outer):
        found.setdefault(key, node)
    if any_registered():   # torch's global module hooks ran in the trace: eager runs the ones registered then
        found[("torch.nn.modules.module", "", global_hooks.NAME)] = global_hooks.guard_node()
    for var, loc in outer.env_reads.items():   # os.environ (env_reads.py): a str, or unbound
        expected = global_value(os.environ, var)
        found[("os", "environ", var)] = Node(GUARD, "", (), attrs={
            "kind": KIND, "test": KIND, "expected": expected, "seen": expected, "module": "os", "owner": "environ",
            "name": var, "what": f"environment variable {var!r} was "
                                f"{_short(os.environ[var]) if var in os.environ else 'unset'} when traced",
            "line": linecache.getline(loc.filename, loc.lineno).strip()}, source=loc, effectful=True)
    objects: dict = {}
    for key, node in list(_closure_guards(fn)) + list(_object_guards(root, outer)):
        objects.setdefault(key, node)
    return [found[k] for k in sorted(found)] + list(objects.values())


def add_guards(outer, graph, allowed: bool, ledger, module=None, fn=None) -> None:
    """Put the guards first in ``graph`` (none where the caller allowed frozen Python state), each noted in
    ``ledger`` (kind ``global``: what a saved file, which keeps no such guard, was traced with)."""
    if allowed:
        return
    nodes = guard_nodes(outer, module, fn)
    for node in nodes:
        ledger.add(KIND, node.attrs["what"], node.source, node.attrs["expected"], warn=False)
    graph.nodes[:0] = nodes
