"""Flatten nested inputs and outputs into leaves and a spec, and rebuild them.

Containers are tuple, list, dict (and dict subclasses such as transformers'
ModelOutput), namedtuple, and classes registered with ``torch.utils._pytree``; everything else
is a leaf. A dict (or OrderedDict) with a tensor among its keys is a ``keyed_dict``: its keys are
leaves too, each before its value (``{a: b}`` of torch.jit.trace's ``strict=False``: a traced
program answers with the tensors it computes as keys, an input passed through as itself).

A loaded file names its output classes by module and qualified name; ``lookup_class`` finds them
in a table of the classes this process has registered with torch's pytree (which holds every
transformers ``ModelOutput`` subclass already imported), never by importing what the file names.
A class it cannot find comes back as a ``Record``: read-only, with attribute, key and index
access in the original order.

>>> leaves, spec = flatten((1, [2, {"a": 3}]))
>>> leaves
[1, 2, 3]
>>> unflatten(spec, [4, 5, 6])
(4, [5, {'a': 6}])
"""
from __future__ import annotations

import collections
import sys
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils import _pytree as torch_pytree   # imported by `import torch` itself

from .records import FrozenRecord

LEAF = "leaf"
REGISTERED = "registered"   # a class registered with torch.utils._pytree; ``keys`` holds (context,)
KEYED = "keyed_dict"   # a dict with tensor keys; ``children``: key, value, key, value, ...


class Spec(FrozenRecord):
    """``kind``: "leaf", "tuple", "list", "dict", "keyed_dict", "namedtuple" or "registered"; ``type``: the container type
    (namedtuple / dict subclass); ``keys``: dict keys; ``children``: the children's Specs."""
    __slots__ = _fields = ("kind", "type", "keys", "children")

    def __init__(self, kind: str, type: Any = None, keys: tuple = (), children: tuple = ()):
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "children", children)

    @property
    def num_leaves(self) -> int:
        if self.kind == LEAF:
            return 1
        return sum(c.num_leaves for c in self.children)

    def describe(self, leaf_names=None) -> str:
        it = iter(leaf_names) if leaf_names is not None else None
        return _describe(self, it)


_LEAF_SPEC = Spec(LEAF)
KEYED_TYPES = (dict, collections.OrderedDict)   # rebuilt from (key, value) pairs


def _is_namedtuple(obj) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def flatten(obj) -> tuple[list, Spec]:
    leaves: list = []
    spec = _flatten(obj, leaves)
    return leaves, spec


def _flatten(obj, leaves) -> Spec:
    if _is_namedtuple(obj):
        return Spec("namedtuple", type(obj), (), tuple(_flatten(o, leaves) for o in obj))
    if isinstance(obj, tuple):
        return Spec("tuple", None, (), tuple(_flatten(o, leaves) for o in obj))
    if isinstance(obj, list):
        return Spec("list", None, (), tuple(_flatten(o, leaves) for o in obj))
    if type(obj) in KEYED_TYPES and any(isinstance(k, torch.Tensor) for k in obj):
        return Spec(KEYED, type(obj), (), tuple(_flatten(x, leaves) for kv in obj.items() for x in kv))
    if getattr(type(obj), "_tj_watched", False):   # an input dict while forward runs (trace/input_keys.py)
        keys = tuple(dict.keys(obj))
        return Spec("dict", dict, keys, tuple(_flatten(dict.__getitem__(obj, k), leaves) for k in keys))
    if isinstance(obj, (dict, Record)):
        keys = tuple(obj.keys())
        return Spec("dict", type(obj), keys, tuple(_flatten(obj[k], leaves) for k in keys))
    node = registered_node(obj)
    if node is not None:
        return _flatten_registered(obj, node, leaves)
    leaves.append(obj)
    return _LEAF_SPEC


def has_kind(spec: Spec, kind: str) -> bool:
    """Does ``spec`` hold a container of ``kind`` anywhere?"""
    return spec.kind == kind or any(has_kind(c, kind) for c in spec.children)


def unflatten(spec: Spec, leaves) -> Any:
    it = iter(leaves)
    return _unflatten(spec, it)


def _unflatten(spec: Spec, it):
    kind = spec.kind
    if kind == LEAF:
        return next(it)
    items = [_unflatten(c, it) for c in spec.children]
    if kind == "tuple":
        return tuple(items)
    if kind == "list":
        return items
    if kind == "namedtuple":
        return spec.type(*items)
    if kind == REGISTERED:
        return _unflatten_registered(spec, items)
    if kind == KEYED:
        return spec.type(zip(items[0::2], items[1::2]))
    d = dict(zip(spec.keys, items))
    return d if spec.type is dict else spec.type(**d) if _accepts_kwargs(spec.type) else spec.type(d)


def _accepts_kwargs(t) -> bool:
    # transformers' ModelOutput is a dataclass built from keywords; OrderedDict takes a mapping
    return hasattr(t, "__dataclass_fields__")


def _describe(spec: Spec, names) -> str:
    if spec.kind == LEAF:
        return next(names) if names is not None else "_"
    if spec.kind == "dict":
        return "{" + ", ".join(f"{k!r}: {_describe(c, names)}" for k, c in zip(spec.keys, spec.children)) + "}"
    if spec.kind == KEYED:
        parts = [_describe(c, names) for c in spec.children]
        return "{" + ", ".join(f"{k}: {v}" for k, v in zip(parts[0::2], parts[1::2])) + "}"
    inner = ", ".join(_describe(c, names) for c in spec.children)
    if spec.kind == "tuple":
        return f"({inner}{',' if len(spec.children) == 1 else ''})"
    if spec.kind == "list":
        return f"[{inner}]"
    return f"{spec.type.__name__}({inner})"


# ---- classes registered with torch.utils._pytree (transformers' outputs, user dataclasses) -------------
def registered_node(obj):
    """torch's pytree registration for ``type(obj)``, for types this module does not handle itself."""
    return torch_pytree.SUPPORTED_NODES.get(type(obj))


def _flatten_registered(obj, node, leaves) -> Spec:
    children, context = node.flatten_fn(obj)
    return Spec(REGISTERED, type(obj), (context,), tuple(_flatten(c, leaves) for c in children))


def _unflatten_registered(spec: Spec, items):
    node = _registered_type(spec.type)
    return node.unflatten_fn(items, spec.keys[0])


def _registered_type(t):
    return torch_pytree.SUPPORTED_NODES[t]


def rebuild_registered(spec: Spec, items: list):
    """Rebuild a registered class from its rebuilt children (generated code calls this)."""
    return _unflatten_registered(spec, items)


# ---- output classes named by a file: a table lookup, and a read-only record otherwise ------------------
def lookup_class(module: str, qualname: str):
    """The class registered with torch's pytree as ``module.qualname``, or None.

    Only a table of classes already registered in this process is searched: nothing is imported
    because a file names it (``os.system`` or an unregistered class gives None). One fixed module
    is imported: ``transformers.modeling_outputs``, for a name under ``transformers.`` when this
    process has already imported transformers (a server with a tokenizer: ~0.1 s then; never the
    1.3 s of importing transformers itself at load)."""
    found = _registered_class(module, qualname)
    if found is None and module.startswith("transformers.") and "transformers" in sys.modules:
        try:
            # optional dependency, imported only when the process has transformers already (see above)
            import transformers.modeling_outputs  # noqa: F401  (a fixed name: its ModelOutputs register themselves)
        except Exception:   # a broken install: the record below still serves
            return None
        found = _registered_class(module, qualname)
    return found


def _registered_class(module: str, qualname: str):
    for cls in list(torch_pytree.SUPPORTED_NODES):
        if getattr(cls, "__module__", None) == module and getattr(cls, "__qualname__", None) == qualname:
            return cls
    return None


_RECORD_TYPES: dict = {}


def record_type(name: str):
    """A ``Record`` subclass called ``name`` (made once per name, from data only)."""
    if name not in _RECORD_TYPES:
        _RECORD_TYPES[name] = type(name, (Record,), {"__slots__": ()})
    return _RECORD_TYPES[name]


class Record(Mapping):
    """A read-only stand-in for an output class a loaded file names but this process cannot find.

    ``r.logits``, ``r["logits"]`` and ``r[0]`` give the same value; iteration, ``keys()``,
    ``items()`` and ``to_tuple()`` follow the original order (as transformers' ``ModelOutput``).
    An int index is a key when the keys hold that int, else a position."""

    __slots__ = ("_data",)

    def __init__(self, data=(), **kwargs):
        object.__setattr__(self, "_data", dict(data, **kwargs))

    def __getitem__(self, key):
        data = self._data
        if isinstance(key, (int, slice)) and not isinstance(key, bool) and key not in data:
            return tuple(data.values())[key]
        return data[key]

    def __getattr__(self, name):
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}; fields: "
                                 f"{', '.join(map(str, self._data))}") from None

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only")

    __delattr__ = __setattr__

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def to_tuple(self) -> tuple:
        return tuple(self._data.values())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._data.items())})"

    def __reduce__(self):
        return (_make_record, (type(self).__name__, self._data))


def _make_record(name: str, data: dict) -> Record:
    return record_type(name)(data)
