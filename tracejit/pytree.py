"""Flatten nested inputs and outputs into leaves and a spec, and rebuild them.

Containers are tuple, list, dict (and dict subclasses such as transformers'
ModelOutput), and namedtuple; everything else is a leaf.

>>> leaves, spec = flatten((1, [2, {"a": 3}]))
>>> leaves
[1, 2, 3]
>>> unflatten(spec, [4, 5, 6])
(4, [5, {'a': 6}])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LEAF = "leaf"
REGISTERED = "registered"   # a class registered with torch.utils._pytree; ``keys`` holds (context,)


@dataclass(frozen=True)
class Spec:
    kind: str                 # "leaf", "tuple", "list", "dict", "namedtuple", "registered"
    type: Any = None          # the container type (namedtuple / dict subclass)
    keys: tuple = ()          # dict keys
    children: tuple = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == LEAF:
            return 1
        return sum(c.num_leaves for c in self.children)

    def describe(self, leaf_names=None) -> str:
        it = iter(leaf_names) if leaf_names is not None else None
        return _describe(self, it)


_LEAF_SPEC = Spec(LEAF)


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
    if isinstance(obj, dict):
        keys = tuple(obj.keys())
        return Spec("dict", type(obj), keys, tuple(_flatten(obj[k], leaves) for k in keys))
    node = registered_node(obj)
    if node is not None:
        return _flatten_registered(obj, node, leaves)
    leaves.append(obj)
    return _LEAF_SPEC


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
    inner = ", ".join(_describe(c, names) for c in spec.children)
    if spec.kind == "tuple":
        return f"({inner}{',' if len(spec.children) == 1 else ''})"
    if spec.kind == "list":
        return f"[{inner}]"
    return f"{spec.type.__name__}({inner})"


# ---- classes registered with torch.utils._pytree (transformers' outputs, user dataclasses) -------------
def registered_node(obj):
    """torch's pytree registration for ``type(obj)``, for types this module does not handle itself."""
    try:
        from torch.utils import _pytree as torch_pytree
    except ImportError:   # pragma: no cover - torch always has it
        return None
    return torch_pytree.SUPPORTED_NODES.get(type(obj))


def _flatten_registered(obj, node, leaves) -> Spec:
    children, context = node.flatten_fn(obj)
    return Spec(REGISTERED, type(obj), (context,), tuple(_flatten(c, leaves) for c in children))


def _unflatten_registered(spec: Spec, items):
    node = _registered_type(spec.type)
    return node.unflatten_fn(items, spec.keys[0])


def _registered_type(t):
    from torch.utils import _pytree as torch_pytree
    return torch_pytree.SUPPORTED_NODES[t]


def rebuild_registered(spec: Spec, items: list):
    """Rebuild a registered class from its rebuilt children (generated code calls this)."""
    return _unflatten_registered(spec, items)
