"""Plain Python objects hanging off the traced modules or globals (config objects): ``global`` guards on their
attributes (hunt20 E, folded into the guard nodes in hunt21).

``self.config.output_attentions`` on a dataclass, a ``SimpleNamespace``, a transformers ``PretrainedConfig``:
forward's branch follows the value at trace time, and a flag flipped on the original's config after the trace
gave the trace's answer silently (torch.jit's too). At the end of a trace, every non-module object found in a
traced module's ``__dict__`` (and the objects those hold, two levels down), and every plain object held by a
module global the user's code named (``CFG.scale``), is found here (``objects``); trace/global_reads.py makes a
``global`` guard per plain attribute (support/global_guards.py's ``guardable``: numbers, strings, None, enums,
small containers of them) whose namespace is the object's ``__dict__`` (attribute ``space``, in memory only).
So they hold wherever module globals' guards hold: the live program traces again (eager's answer), an optimized
one and the onnxruntime / OpenVINO programs (their Python-side check) too, and ``save`` / ``export_onnx`` refuse
a first trace whose object changed since. A file keeps no such guard (the program is the model then).

What is guarded is every plain attribute of those objects, not only the ones forward read: a change to an
attribute forward never read retraces once (too strict, never wrong). Modules' own plain attributes are not
guarded here (trace/module_flags.py and python_state.py look at modules).

``ObjectCheck`` is the call-time check of one object's guards together: its attributes read as one tuple and
compared by identity with the objects the check last saw equal to the traced values (a few C-level steps for
any number of attributes); only where that fails are the values compared as the guards compare them.
"""
from __future__ import annotations

import itertools
import operator
import types
from collections.abc import Mapping

import torch
from torch import nn

from .global_guards import COUNT, UNBOUND, global_value, is_container, value_of

_SKIP = (nn.Module, torch.Tensor, types.FunctionType, types.MethodType, types.BuiltinFunctionType, type,
         types.ModuleType, dict, list, set, tuple)   # (containers: a module's hook OrderedDicts hold no config)
_MUTABLE = frozenset(t.__name__ for t in (list, dict, set))   # compared with copies (the type names guardable gives)
_chain = itertools.chain.from_iterable
_call = getattr(operator, "call", None) or (lambda fn, arg: fn(arg))   # operator.call: Python 3.11+
_DIFFERENT = object()   # never identical to an attribute's value: the slow comparison decides


def _objects(value):
    """The plain Python object(s) ``value`` is, if any: an object with a ``__dict__`` (or only ``__slots__``) that
    is not a module, tensor, function or class, and not torch's or tracejit's own."""
    if isinstance(value, _SKIP) or namespace_of(value) is None:
        return
    mod = type(value).__module__ or ""
    if mod.startswith(("torch", "tracejit")):
        return
    yield value


def namespace_of(obj):
    """Where ``obj``'s attributes are: its ``__dict__``, a ``SlotSpace`` for an object with ``__slots__`` only
    (``@dataclass(slots=True)``), else None."""
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return attrs
    if attrs is None and _slot_names(type(obj)):
        return SlotSpace(obj)
    return None


def _slot_names(cls) -> tuple:
    names = []
    for c in cls.__mro__:
        slots = vars(c).get("__slots__", ())
        names += [slots] if isinstance(slots, str) else [n for n in slots if isinstance(n, str)]
    return tuple(n for n in dict.fromkeys(names) if n not in ("__dict__", "__weakref__"))


class SlotSpace(Mapping):
    """An object's ``__slots__`` as a read-only mapping, name -> value (an unset slot is a name not there)."""

    def __init__(self, obj):
        self.obj, self.names = obj, _slot_names(type(obj))

    def __getitem__(self, name):
        if name not in self.names:
            raise KeyError(name)
        try:
            return getattr(self.obj, name)
        except AttributeError:
            raise KeyError(name) from None

    def __iter__(self):
        return iter([n for n in self.names if n in self])

    def __len__(self):
        return len(list(iter(self)))


def objects(module: nn.Module | None, found) -> list:
    """``[(path, object), ...]``: the plain objects of the modules' ``__dict__`` (and two levels down in them),
    then those held by the module globals ``found`` (``(globals dict, name)`` pairs user code named), each once."""
    seen: set = set()
    out = []

    def visit(obj, path: str, depth: int):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        out.append((path, obj))
        if depth < 2:
            for k, v in list(namespace_of(obj).items()):
                for inner in _objects(v):
                    visit(inner, f"{path}.{k}", depth + 1)

    for name, m in (module.named_modules() if module is not None else ()):
        for key, value in list(vars(m).items()):
            if key in ("_parameters", "_buffers", "_modules"):
                continue
            for obj in _objects(value):
                visit(obj, f"{name + '.' if name else ''}{key}", 0)
    for g, name in found:
        for obj in _objects(g.get(name)):
            visit(obj, f"{g.get('__name__', '?')}.{name}", 0)
    return out


class ObjectCheck:
    """The guards on one object's attributes (``mapping``: its ``__dict__``), checked together.

    >>> ns = types.SimpleNamespace(flag=False, eps=1e-5, sizes=[1, 2])
    >>> check = ObjectCheck(vars(ns))
    >>> for k, name in enumerate(vars(ns)): check.add(k, name, global_value(vars(ns), name))
    >>> check.changed(), setattr(ns, "eps", 1e-5 * 1), check.changed(), ns.sizes.append(3), check.changed()
    (False, None, False, None, True)
    >>> ns.sizes.pop(), check.changed(), setattr(ns, "flag", 0), check.changed()
    (3, False, None, True)

    Fast test: the attributes, read as one tuple, are the objects the check last found equal to the traced values
    (identity), and the mutable containers among them equal copies taken then. A mutable container's items are
    compared by value there: an item replaced by an equal one of another type (``1`` by ``1.0``) is not seen.
    """
    __slots__ = ("mapping", "entries", "names", "values", "get", "mutable", "get_mutable", "copies", "absent",
                 "size")

    def __init__(self, mapping):
        self.mapping = mapping
        self.entries: list = []      # (guard index, name, expected) in the graph's order
        self.names: tuple = ()       # every attribute guarded
        self.values: tuple = ()      # the objects last seen equal to the traced values (_DIFFERENT: not seen)
        self.mutable: tuple = ()     # the names of lists, dicts and sets among them ...
        self.copies: tuple = ()      # ... and copies of them, last seen equal to the traced values
        self.absent: tuple = ()      # the names the trace found unbound (a class attribute inherited)
        self.get = self.get_mutable = _getter(())
        self.size = None             # how many attributes the object had (an attribute added since: getattr / hasattr)

    def add(self, k: int, name: str, expected) -> None:
        self.entries.append((k, name, expected))
        if name == COUNT:
            self.size = expected[1]
            return
        if expected == UNBOUND:
            self.absent += (name,)
            return
        self.names += (name,)
        self.values += (_DIFFERENT,)
        if is_container(expected) and expected[0] in _MUTABLE:
            self.mutable += (name,)
            self.copies += (_DIFFERENT,)
        self.get, self.get_mutable = _getter(self.names), _getter(self.mutable)
        #   (the first call's check finds its references: _equal, once, not once per attribute added here)

    def changed(self) -> bool:
        if self.absent and any(map(self.mapping.__contains__, self.absent)) or \
                self.size is not None and len(self.mapping) != self.size:
            return True
        try:
            now = self.get(self.mapping)
            if all(map(operator.is_, now, self.values)) and self.get_mutable(self.mapping) == self.copies:
                return False
        except KeyError:   # an attribute deleted: unbound now
            return True
        return not self._equal()

    def _equal(self) -> bool:
        """Are the attributes the traced values now (as the guards compare them)? Then the check takes them as its
        reference (tuple assignments: another thread's check sees the old reference or the new)."""
        mapping = self.mapping
        now = tuple(mapping.get(name, _DIFFERENT) for name in self.names)
        copies = tuple(_copy(mapping.get(name, _DIFFERENT)) for name in self.mutable)
        seen = dict(zip(self.names, now))
        seen.update(zip(self.mutable, copies))
        if any((UNBOUND if seen.get(name, _DIFFERENT) is _DIFFERENT else value_of(seen[name])) != expected
               for _, name, expected in self.entries if name not in self.absent and name != COUNT):
            return False
        self.values, self.copies = now, copies
        return True

    def fail(self, guard) -> None:
        """``guard(k, value now)`` (generated code's ``_tj_guard``) for the first attribute that changed; nothing
        when none has (it was changed back in the meantime)."""
        for k, name, expected in self.entries:
            now = global_value(self.mapping, name)
            if now != expected:
                guard(k, now)


class ObjectChecks:
    """The ``ObjectCheck`` of every object one generated function guards, checked together: each object's own
    ``changed`` is five C-level steps (MobileNet-V3-small's 48 modules read as config: 12 us a call), the group's
    fast test is the same test over all attributes of all objects at once (about 1 us for those 48).

    >>> a, b = types.SimpleNamespace(flag=False), types.SimpleNamespace(sizes=[1, 2])
    >>> group = ObjectChecks()
    >>> for ns in (a, b):
    ...     check = group.join(ObjectCheck(vars(ns)))
    ...     for k, name in enumerate(vars(ns)): check.add(k, name, global_value(vars(ns), name))
    >>> group.changed(), b.sizes.append(3), group.changed(), b.sizes.pop(), group.changed()
    (False, None, True, 3, False)

    Fast test: every object has as many attributes as traced (where its check counts them) and none of the
    names the trace found unbound, and the attributes are the objects the checks last found equal to the traced
    values (identity; mutable containers: equal to the copies). Otherwise each check decides (``ObjectCheck``'s
    own slow comparison), and the group takes their references again when none changed.
    """
    __slots__ = ("checks", "_fast")

    def __init__(self):
        self.checks: list = []
        self._fast = None   # the flattened tables of the fast test (built on the first call, rebuilt after a slow one)

    def join(self, check: "ObjectCheck") -> "ObjectCheck":
        self.checks.append(check)
        self._fast = None
        return check

    def _tables(self):
        checks = self.checks
        named = [c for c in checks if c.names]
        maps = tuple(c.mapping for c in named)
        # one C-level itemgetter per object (a tuple even for one name: read twice), chained: 112 attributes of
        # T5's configs 3.2 -> 2.5 us against one getitem per attribute
        getters = tuple(operator.itemgetter(*(c.names if len(c.names) > 1 else c.names * 2)) for c in named)
        values = tuple(v for c in named for v in (c.values if len(c.values) > 1 else c.values * 2))
        mut_maps = tuple(c.mapping for c in checks for _ in c.mutable)
        mut_names = tuple(n for c in checks for n in c.mutable)
        copies = tuple(v for c in checks for v in c.copies)
        sized = tuple(c.mapping for c in checks if c.size is not None)
        sizes = tuple(c.size for c in checks if c.size is not None)
        absent_maps = tuple(c.mapping for c in checks for _ in c.absent)
        absent_names = tuple(n for c in checks for n in c.absent)
        return maps, getters, values, mut_maps, mut_names, copies, sized, sizes, absent_maps, absent_names

    def changed(self) -> bool:
        fast = self._fast
        if fast is None:
            fast = self._fast = self._tables()
        maps, getters, values, mut_maps, mut_names, copies, sized, sizes, absent_maps, absent_names = fast
        try:
            if (tuple(map(len, sized)) == sizes and not any(map(operator.contains, absent_maps, absent_names))
                    and all(map(operator.is_, _chain(map(_call, getters, maps)), values))
                    and tuple(map(operator.getitem, mut_maps, mut_names)) == copies):
                return False
        except KeyError:   # an attribute deleted: its check says so
            pass
        if any([c.changed() for c in self.checks]):   # every check runs: each takes its references again
            return True
        self._fast = self._tables()
        return False

    def fail(self, guard) -> None:
        """``guard(k, value now)`` for the first attribute of the first object that changed."""
        for check in self.checks:
            if check.changed():
                check.fail(guard)


def _getter(names: tuple):
    """``mapping -> tuple of mapping[name] for name in names`` (raises KeyError for a name not there)."""
    if len(names) == 1:
        name = names[0]
        return lambda mapping: (mapping[name],)
    return operator.itemgetter(*names) if names else (lambda mapping: ())


def _copy(value):
    return value.copy() if isinstance(value, (list, dict, set)) else value


class CellSpace(Mapping):
    """A function's closure cells as a read-only mapping, free variable name -> the cell's contents (an empty
    cell is a name not there): the namespace of ``global`` guards on closure variables (trace/global_reads.py)."""

    def __init__(self, fn):
        code = getattr(fn, "__code__", None)
        self.cells = dict(zip(code.co_freevars, fn.__closure__ or ())) if code is not None else {}

    def __getitem__(self, name):
        try:
            return self.cells[name].cell_contents
        except ValueError:
            raise KeyError(name) from None

    def __iter__(self):
        return iter([n for n in self.cells if n in self])

    def __len__(self):
        return len(list(iter(self)))
