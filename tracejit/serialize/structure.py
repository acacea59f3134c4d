"""Input / output structures <-> data: containers by kind, classes by module and qualified name.

A class is found again on load by a table lookup (``pytree.lookup_class``: the classes registered
with torch's pytree in this process), never imported because a file names it; one not found is a
read-only ``pytree.Record`` of the same name (a namedtuple: a look-alike made from its fields).
"""
from __future__ import annotations

import collections

from ..errors import LoadError, SaveError
from ..pytree import KEYED, KEYED_TYPES, Record, Spec, lookup_class, record_type
from .constants import decode_const, encode_const
from ..patterns import ascii_identifier


_NAMEDTUPLES: dict = {}


def _ascii_name(text) -> bool:
    """``[A-Za-z][A-Za-z0-9_]{0,99}``: namedtuple refuses keywords and a leading _ (patterns.ascii_identifier)."""
    return ascii_identifier(text, 100) and text[0] != "_"


def encode_spec(spec: Spec, where: str):
    """A structure as data: containers by kind, classes by module and qualified name (looked up, never
    imported, on load: pytree.lookup_class)."""
    d = {"kind": spec.kind}
    if spec.kind == "registered":
        d["keys"] = [encode_const(k, where) for k in _registered_keys(spec)]
        try:
            d["context"] = encode_const(spec.keys[0], where)
        except SaveError:
            raise SaveError(f"{where}: the inputs or outputs hold a {spec.type.__qualname__}, a class registered with "
                            "torch.utils._pytree whose flatten context is not plain data, so a file cannot rebuild "
                            "it; return plain containers (or a dataclass registered with register_dataclass)"
                            ) from None
    if spec.kind == "namedtuple":
        d["fields"] = list(spec.type._fields)
    if spec.kind == "dict":
        d["keys"] = [encode_const(k, where) for k in spec.keys]
    if spec.kind == KEYED:
        d["name"] = spec.type.__name__   # dict or OrderedDict (pytree._KEYED_TYPES)
    if spec.kind in ("namedtuple", "dict", "registered"):
        d["name"] = spec.type.__name__
        if spec.type is not dict and not issubclass(spec.type, Record):
            d["module"], d["qualname"] = spec.type.__module__, spec.type.__qualname__
    if spec.children:
        d["children"] = [encode_spec(c, where) for c in spec.children]
    return d


def _registered_keys(spec: Spec) -> list:
    """Names of a registered class's children: a Record's keys when the class is not found on load
    (register_dataclass's context is [field names, names of the fields that were None])."""
    context = spec.keys[0]
    if isinstance(context, (list, tuple)) and context and isinstance(context[0], (list, tuple)) \
            and len(context[0]) == len(spec.children) and all(isinstance(k, str) for k in context[0]):
        return list(context[0])
    return [f"field{i}" for i in range(len(spec.children))]


def _found_class(d: dict, where: str):
    """The class a structure names, from the table of registered classes (None: not found)."""
    module, qualname = d.get("module"), d.get("qualname")
    if module is None and qualname is None:
        return None
    if not (isinstance(module, str) and isinstance(qualname, str) and len(module) <= 200 and len(qualname) <= 200):
        raise LoadError(f"{where}: bad class name in the input/output structure")
    return lookup_class(module, qualname)


def _record_name(d: dict, where: str) -> str:
    name = d.get("name")
    if not (_ascii_name(name)):
        raise LoadError(f"{where}: bad class name in the input/output structure")
    return name


def decode_spec(d, where: str, depth: int = 0) -> Spec:
    if depth > 32 or not isinstance(d, dict):
        raise LoadError(f"{where}: malformed or too deeply nested input/output structure")
    kind = d.get("kind")
    children = tuple(decode_spec(c, where, depth + 1) for c in _list_of(d.get("children", []), where))
    if kind == "leaf":
        return Spec("leaf")
    if kind in ("tuple", "list"):
        return Spec(kind, None, (), children)
    if kind == KEYED:   # a dict keyed by tensors: key, value, key, value, ...
        found = {t.__name__: t for t in KEYED_TYPES}.get(d.get("name"))
        if found is None or len(children) % 2:
            raise LoadError(f"{where}: bad keyed_dict structure (a dict or OrderedDict of key, value pairs)")
        return Spec(KEYED, found, (), children)
    if kind == "namedtuple":
        name, fields = d.get("name"), d.get("fields")
        if not (_ascii_name(name) and isinstance(fields, list)
                and len(fields) == len(children) and len(fields) <= 1000
                and all(_ascii_name(f) for f in fields)):
            raise LoadError(f"{where}: bad namedtuple description")
        found = _found_class(d, where)
        if found is not None and getattr(found, "_fields", None) == tuple(fields):
            return Spec("namedtuple", found, (), children)
        key = (name, tuple(fields))
        if key not in _NAMEDTUPLES:   # a look-alike of the user's type, made from data only
            _NAMEDTUPLES[key] = collections.namedtuple(name, fields)
        return Spec("namedtuple", _NAMEDTUPLES[key], (), children)
    if kind in ("dict", "registered"):
        keys = tuple(decode_const(k, where) for k in _list_of(d.get("keys", []), where))
        if not all(k is None or isinstance(k, int) or (isinstance(k, str) and len(k) <= 1000) for k in keys):
            raise LoadError(f"{where}: dict keys must be strings or ints")
        if len(keys) != len(children):
            raise LoadError(f"{where}: {kind} structure has {len(keys)} keys and {len(children)} values")
        try:
            hash(keys)
        except TypeError:
            raise LoadError(f"{where}: dict keys must be constants") from None
        if kind == "dict" and len(set(keys)) != len(keys):   # a trace never writes one; a dict would drop a value
            seen: set = set()
            again = next(k for k in keys if k in seen or seen.add(k))
            raise LoadError(f"{where}: dict structure repeats key {again!r} (keys {list(keys)[:20]!r}): one of its "
                            "values would be dropped (an output) or read twice (an input)")
        found = _found_class(d, where)
        if kind == "registered" and found is not None and found not in (dict, list, tuple):
            return Spec("registered", found, (decode_const(d.get("context"), where),), children)
        if kind == "dict" and found is not None and issubclass(found, dict):
            return Spec("dict", found, keys, children)
        if kind == "dict" and d.get("module") is None:   # a plain dict (older files: any dict subclass)
            return Spec("dict", dict, keys, children)
        return Spec("dict", record_type(_record_name(d, where)), keys, children)
    raise LoadError(f"{where}: unknown structure kind {kind!r}")


def _list_of(x, where):
    if not isinstance(x, list):
        raise LoadError(f"{where}: expected a list, found {type(x).__name__}")
    return x
