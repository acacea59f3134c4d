"""The value of a module-level global as a ``global`` guard compares it (trace/global_reads.py).

A global the user's code read while tracing (``SCALE = 2.0``, ``USE_BIAS = True``, ``SIZES = (64, 128)``,
``CFG = {"eps": 1e-5}``) is frozen into the trace: eager reads it again at every call. So the generated
code compares ``global_value(module.__dict__, name)`` with the traced one on entry. The value is plain data:

- bools, ints, floats, strings, bytes, None and complex numbers as ``support/guards.plain_value`` gives them,
  tagged with their type's name (``1`` and ``1.0`` and ``True`` promote tensors differently, so they differ);
- tuples, lists, dicts, sets and frozensets of those, at most ``MAX_ITEMS`` items, by their items (a dict in
  its order, a set sorted by ``repr``);
- anything else: ``None`` from ``guardable`` (no guard: tensors are captures, modules, functions and
  classes are code, other objects are compared by identity elsewhere or not at all).

A value that is no longer of a guardable kind, or a name no longer bound, gives a value no trace recorded.

>>> g = {"SCALE": 2.0, "SIZES": (64, 128)}
>>> global_value(g, "SCALE"), global_value(g, "SIZES")
(['float', 2.0], ['tuple', [['int', 64], ['int', 128]]])
>>> global_value({"SCALE": 2}, "SCALE") == global_value(g, "SCALE")
False
>>> global_value({}, "SCALE")
['unbound']
"""
from __future__ import annotations

import enum
import sys
from collections.abc import Mapping

from .guards import GuardFailure, plain_value

MAX_ITEMS = 64      # a larger container (a vocabulary, a table) is not guarded item by item
_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_CONTAINERS = (tuple, list, dict, set, frozenset)
_UNBOUND = UNBOUND = ["unbound"]


def _scalar(v) -> list:
    return [type(v).__name__, plain_value(v) if not isinstance(v, bytes) else v.hex()]


def guardable(value) -> list | None:
    """``value`` as plain data a guard compares, or None where it is not guarded (module docstring)."""
    if type(value) in _SCALARS:
        return _scalar(value)
    if isinstance(value, enum.Enum):   # a member, by its class and name (compared by identity at call time)
        return ["enum", f"{type(value).__module__}.{type(value).__qualname__}.{value.name}"]
    if type(value) in _CONTAINERS and len(value) <= MAX_ITEMS:
        if isinstance(value, dict):
            items = [(guardable(k), guardable(v)) for k, v in value.items()]
            if any(k is None or v is None for k, v in items):
                return None
            return ["dict", [[k, v] for k, v in items]]
        members = [guardable(v) for v in value]
        if any(m is None for m in members):
            return None
        if isinstance(value, (set, frozenset)):
            members.sort(key=repr)
        return [type(value).__name__, members]
    return None


COUNT = "<count>"   # the name of the guard on how many attributes an object has (support/object_checks.py)


def global_value(mapping: dict, name: str) -> list:
    """What the guard on global ``name`` of ``mapping`` (a module's ``__dict__``) reads at call time; for ``COUNT``
    (never an identifier) the number of names ``mapping`` holds."""
    if name == COUNT:
        return ["int", len(mapping)]
    try:
        value = mapping[name]
    except KeyError:
        return _UNBOUND
    return value_of(value)


def value_of(value) -> list:
    """What a ``global`` guard compares for ``value``: ``guardable``'s plain data, else its type's name."""
    plain = guardable(value)
    return plain if plain is not None else ["object", type(value).__qualname__]


def is_container(expected) -> bool:
    """Is ``expected`` (a guard's value) a container's or an enum's, compared by ``ContainerCheck``?"""
    return isinstance(expected, list) and len(expected) == 2 and expected[0] in ("tuple", "list", "dict", "set",
                                                                                  "frozenset", "enum")


def namespace(attrs: dict) -> Mapping:
    """Where a ``global`` guard reads: the ``__dict__`` of the module ``attrs["module"]`` names, or of its class
    ``attrs["owner"]`` (a live mapping proxy), or the ``__dict__`` of an object the trace held (``attrs["space"]``:
    support/object_checks.py); an empty dict where that module or class is gone (the guard fails)."""
    if attrs.get("space") is not None:
        return attrs["space"]
    obj = sys.modules.get(attrs.get("module"))
    owner = attrs.get("owner")
    if owner and obj is not None:
        obj = getattr(obj, owner, None)
        if isinstance(obj, Mapping):   # os.environ (trace/env_reads.py)
            return obj
        obj = obj if isinstance(obj, type) else None
    space = getattr(obj, "__dict__", None) if obj is not None else None
    return space if isinstance(space, Mapping) else {}


def stale_global(attrs: dict) -> str | None:
    """Where the ``global`` guard with these attributes fails now: what changed (else None). A file keeps no such
    guard (serialize/encode.py), so it is saved only with the values the global has at the time of saving."""
    mapping = namespace(attrs)
    name = attrs.get("name")
    now = global_value(mapping, name)
    if now == attrs.get("expected"):
        return None
    said = repr(mapping[name])[:80] if now is not _UNBOUND else "unbound"
    return f"{attrs.get('what')}, now {said}"


def inline_check(expected, read: str, expr) -> str | None:
    """The generated code's failing condition for a scalar global without calling ``global_value`` (a guard per
    global on every call: a dict lookup and a compare, ~0.1 us), or None where ``global_value`` must decide
    (containers, NaN, signed zeros). ``read``: the text reading the global (unbound: None); ``expr``: renders
    a constant (codegen's ``CodeGen.expr``).

    >>> inline_check(["float", 2.0], "g.get('K')", repr)
    "g.get('K').__class__ is not float or g.get('K') != 2.0"
    >>> inline_check(["bool", True], "g.get('F')", repr)
    "g.get('F') is not True"
    """
    if expected == _UNBOUND:   # an environment variable unset when traced (trace/env_reads.py): values are str
        return f"{read} is not None"
    if not (isinstance(expected, list) and len(expected) == 2):
        return None
    kind, value = expected
    if kind == "NoneType":
        return f"{read} is not None"
    if kind == "bool" and isinstance(value, bool):
        return f"{read} is not {value!r}"
    if (kind, type(value)) in (("int", int), ("float", float), ("str", str)):
        return f"{read}.__class__ is not {kind} or {read} != {expr(value)}"
    return None


class ContainerCheck:
    """The call-time check of a container global: the object the trace read, unchanged (the same object, equal to a
    copy taken when the check was made, its items of the same types) in a few C-level compares; anything else is
    decided by ``global_value`` (a rebinding to an equal container passes).

    >>> g = {"CFG": {"eps": 0.5}}
    >>> check = ContainerCheck(g, "CFG", global_value(g, "CFG"))
    >>> check.changed(), g["CFG"].update(eps=1), check.changed()
    (False, None, True)
    """
    __slots__ = ("mapping", "name", "expected", "obj", "copy", "types")

    def __init__(self, mapping: dict, name: str, expected):
        self.mapping, self.name, self.expected = mapping, name, expected
        obj = mapping.get(name)
        same = isinstance(obj, _CONTAINERS + (enum.Enum,)) and global_value(mapping, name) == expected
        self.obj = obj if same else _UNBOUND   # never the object read: always decided by global_value
        mutable = same and isinstance(obj, (list, dict, set))
        self.copy = obj.copy() if mutable else None
        self.types = list(map(type, _items(obj))) if same and not isinstance(obj, enum.Enum) else []

    def changed(self) -> bool:
        v = self.mapping.get(self.name)
        if v is self.obj and (self.copy is None or v == self.copy) and list(map(type, _items(v))) == self.types:
            return False
        return global_value(self.mapping, self.name) != self.expected


def _items(container):
    if isinstance(container, enum.Enum):
        return ()
    return container.values() if isinstance(container, dict) else container


class IdentityChecks:
    """The in-memory checks of the module-level tensors a trace captured (trace/global_tensors.py): each name must
    still be bound to the very tensor the trace read. Eager reads the name again at every call, so a rebinding
    (``MEAN = MEAN.to(torch.float64)``, ``STATS = torch.load(...)``) must be seen; an update in place is the
    captured object itself (nothing to check: the program reads it). Held by the Graph (``memory_checks``), not
    in it: a file keeps no check of Python globals, and loading gives the same graph text and code.

    ``items``: ``(namespace, name, tensor, node)`` per global, ``node`` a ``tracejit::guard`` made for the
    error only (kind ``global``: what, line, source). ``values``: the same for plain values compared by equality
    (the scalar configuration of torch's and libraries' modules: trace/module_config.py), all in one C-level
    tuple compare per call.

    >>> g, cfg = {"MEAN": object()}, {"p": 0.5}
    >>> checks = IdentityChecks([(g, "MEAN", g["MEAN"], None)], [(cfg, "p", 0.5, None)])
    >>> checks.changed(), cfg.update(p=0.0), checks.changed(), cfg.update(p=0.5), g.update(MEAN=1), checks.changed()
    (False, None, True, None, None, True)
    """
    __slots__ = ("items", "values", "changed")

    def __init__(self, items, values=()):
        self.items = tuple(items)
        self.values = tuple(values)
        self.changed = _changed_function(self.items, self.values)   # () -> bool: does a check fail now?

    def joined(self, items=(), values=()) -> "IdentityChecks":
        """These checks and ``items`` / ``values`` more."""
        return IdentityChecks(self.items + tuple(items), self.values + tuple(values))

    def _failing(self):
        """``(node, now)`` of the first check that fails now, or None."""
        for mapping, name, obj, node in self.items:
            now = mapping.get(name, _UNBOUND)
            if now is not obj:
                return node, _describe(now)
        for mapping, name, value, node in self.values:
            now = mapping.get(name, _UNBOUND)
            if now != value or type(now) is not type(value):
                return node, "unbound" if now is _UNBOUND else now
        return None

    def check(self, fn_name: str) -> None:
        """Raise GuardError (``fail``) if a check fails now; what the callers of a compiled method run first."""
        if self.changed():
            self.fail(fn_name)

    def fail(self, fn_name: str):
        """Raise the GuardError of the first check that fails now (as a graph's guard would)."""
        hit = self._failing()
        if hit is not None:
            node, now = hit
            GuardFailure([(node, f"{node.attrs['name']} is as traced")], fn_name)(0, now)

    def what_changed(self) -> str:
        """The first changed check, in words (for save's refusal), or ``""``."""
        hit = self._failing()
        return f"{hit[0].attrs['what']} ({hit[0].source}), now {hit[1]!r}" if hit is not None else ""


def _changed_function(items, values):
    """The generated ``changed()`` of ``IdentityChecks``: one expression, every check a dict lookup and a compare.

    Called before every call of a program that holds checks, so it is code, not a loop: for a 3-layer MLP's two
    ``ReLU.inplace`` settings 0.04 us against 0.25 for a loop of tuple compares. ``True`` / ``False`` / ``None``
    compare by identity (``1`` is not ``True``: ``_failing`` tells them apart too); other values as a tuple
    compares its items (identity first, so a NaN setting equals itself), through a one-item ``in``.

    >>> ns = {"p": 0.5, "inplace": False}
    >>> changed = _changed_function((), [(ns, "p", 0.5, None), (ns, "inplace", False, None)])
    >>> changed(), ns.update(inplace=0), changed(), ns.update(inplace=False, p=float("nan")), changed()
    (False, None, True, None, True)
    """
    terms, env = [], {"_U": _UNBOUND}
    for i, (mapping, name, obj, _) in enumerate(items):
        env[f"m{i}"], env[f"o{i}"] = mapping, obj
        terms.append(f"m{i}.get({name!r}, _U) is not o{i}")
    for j, (mapping, name, value, _) in enumerate(values):
        env[f"v{j}"] = mapping
        if value is None or value is True or value is False:
            terms.append(f"v{j}[{name!r}] is not {value!r}")
        else:
            env[f"t{j}"] = (value,)
            terms.append(f"v{j}[{name!r}] not in t{j}")
    names = ", ".join(env)
    source = (f"def make({names}):\n"
              f"    def changed():\n"
              f"        try:\n"
              f"            return {' or '.join(terms) or 'False'}\n"
              f"        except KeyError:   # an attribute deleted since\n"
              f"            return True\n"
              f"    return changed\n")
    scope: dict = {}
    exec(compile(source, "<tracejit memory checks>", "exec"), scope)
    return scope["make"](**env)


def _describe(value) -> str:
    if value is _UNBOUND:
        return "unbound"
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    return f"another {type(value).__name__}" + (f" (shape {tuple(shape)}, dtype {dtype})" if dtype is not None else "")
