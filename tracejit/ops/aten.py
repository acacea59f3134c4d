"""ATen op facts, derived once from torch's own tags and schemas (plus ops/overrides.py).

Names may be qualified (``aten::add_.Tensor``: that overload) or bare (``add_``: any of its overloads).
Every function is cached and looks an op up on first use: nothing is enumerated at import.

    is_random(op)        ATen tags it ``nondeterministic_seeded`` (rand, dropout, bernoulli, lstm, sdpa, ...)
    draws_random(op, args, kwargs)   is_random and its switches (train=, dropout_p=) do not turn it off
    takes_generator(op)  one of its schemas has a ``generator`` argument
    is_dropout(op)       (input, p, train) and random: dropout, feature_dropout, alpha_dropout, ... and their ``_``
    is_pointwise(op)     ATen tags it ``pointwise``
    is_inplace(op)       it writes its first argument (schema alias ``Tensor(a!) self``)
    functional_of(op)    ``aten::add_.Tensor`` -> ``aten::add.Tensor`` (the op itself when not in-place)
    may_alias(op)        its result may share memory with its first argument (schema alias ``Tensor(a)``)
    is_mergeable(op)     two calls with equal arguments give equal results (not random, not uninitialized)
    has_data_dependent_shape(op)  ATen tags it ``dynamic_output_shape`` (nonzero, masked_select, index.Tensor, ...)
    schema_of(op)        torch's FunctionSchema (None for an unknown op); exact_schema, schemas_of
"""
from __future__ import annotations

import functools

import torch

from . import custom, overrides
from .names import split_name


@functools.lru_cache(maxsize=None)
def _overloads(op: str) -> tuple:
    """The OpOverloads ``op`` names: its one overload, or all of a bare / overload-less name's."""
    ns, name, overload = split_name(op)
    try:
        packet = getattr(getattr(torch.ops, ns or "aten"), name)
        names = packet.overloads()
    except (AttributeError, RuntimeError, TypeError):   # not an ATen op (a Python helper's name)
        return ()
    if overload:
        return (getattr(packet, overload),) if overload in names else ()
    return tuple(getattr(packet, o) for o in names)


def schema_of(op: str):
    """torch's FunctionSchema of ``op`` (its ``default`` overload, or its first, when none is named)."""
    found = _overloads(op)
    if not found:
        return None
    default = [o for o in found if o._overloadname == "default"]
    return (default or list(found))[0]._schema


@functools.lru_cache(maxsize=None)
def schemas_of(op: str) -> tuple:
    """``(overload name, FunctionSchema)`` of each overload ``op`` names (one, or all of a bare name's), in
    torch's order; () for an unknown op."""
    return tuple((o._overloadname, o._schema) for o in _overloads(op))


@functools.lru_cache(maxsize=None)
def exact_schema(op: str):
    """The schema of exactly the overload ``op`` names (``default`` when it names none); None if torch has
    no such overload."""
    ns, name, overload = split_name(op)
    found = _overloads(f"{ns or 'aten'}::{name}.{overload or 'default'}")
    return found[0]._schema if found else None


def _tagged(op: str, tag) -> bool:
    return any(tag in o.tags for o in _overloads(op))


@functools.lru_cache(maxsize=None)
def has_data_dependent_shape(op: str) -> bool:
    """Does ATen tag ``op`` as giving a result whose shape depends on its inputs' values (``dynamic_output_shape``:
    nonzero, masked_select, unique, index.Tensor, repeat_interleave.Tensor, ...), or is it a kept custom op that
    does (ops/custom.py: torchvision's nms)?"""
    return _tagged(op, torch.Tag.dynamic_output_shape) or custom.custom_data_dependent_shape(op)


@functools.lru_cache(maxsize=None)
def is_random(op: str) -> bool:
    """Does ATen tag ``op`` as drawing from the random number generator?"""
    return _tagged(op, torch.Tag.nondeterministic_seeded)


@functools.lru_cache(maxsize=None)
def _switches(op: str) -> tuple:
    """(argument name, position, test) of the arguments that can turn ``op``'s randomness off."""
    schema = schema_of(op)
    if schema is None:
        return ()
    return tuple((a.name, i, overrides.RANDOM_SWITCHES[a.name], a.default_value if a.has_default_value() else None)
                 for i, a in enumerate(schema.arguments) if a.name in overrides.RANDOM_SWITCHES)


def draws_random(op: str, args=(), kwargs=None) -> bool:
    """Does this call of ``op`` draw random numbers? (``dropout(x, 0.5, train=False)`` does not.)

    ``args`` / ``kwargs`` follow the op's schema order (F.dropout's ``training=`` is read as ``train``)."""
    if not is_random(op):
        return False
    kwargs = kwargs or {}
    for name, position, test, default in _switches(op):
        if name in kwargs:
            value = kwargs[name]
        elif name == "train" and "training" in kwargs:
            value = kwargs["training"]
        elif position < len(args):
            value = args[position]
        else:
            value = default
        if isinstance(value, (bool, int, float)) and (not value if test == "true" else value == 0):
            return False
    return True


@functools.lru_cache(maxsize=None)
def takes_generator(op: str) -> bool:
    """Does one of ``op``'s schemas take a ``generator=`` argument?"""
    return any(a.name == "generator" for o in _overloads(op) for a in o._schema.arguments)


@functools.lru_cache(maxsize=None)
def is_dropout(op: str) -> bool:
    """A random op called as (input, p, train): dropout, feature_dropout, alpha_dropout, feature_alpha_dropout
    and their in-place forms; in eval mode each returns its input."""
    schema = schema_of(op)
    return (schema is not None and is_random(op)
            and [a.name for a in schema.arguments][1:] == ["p", "train"] and len(schema.returns) == 1)


@functools.lru_cache(maxsize=None)
def is_pointwise(op: str) -> bool:
    """Does ATen tag ``op`` pointwise (each output element from the same-index input elements)?"""
    return _tagged(op, torch.Tag.pointwise)


def _writes_first(schema) -> bool:
    first = schema.arguments[0] if schema.arguments else None
    return first is not None and first.alias_info is not None and first.alias_info.is_write


@functools.lru_cache(maxsize=None)
def is_inplace(op: str) -> bool:
    """Does ``op`` write into its first argument (``Tensor(a!) self``; ``out=`` overloads do not count)?"""
    found = [o for o in _overloads(op) if "out" not in o._overloadname]
    if not found:
        name = split_name(op).name
        return name.endswith("_") and not name.endswith("__") and not name.startswith("_")
    return any(_writes_first(o._schema) for o in found)


@functools.lru_cache(maxsize=None)
def functional_of(op: str) -> str:
    """The out-of-place form of an in-place op: ``aten::relu_.default`` -> ``aten::relu.default``."""
    ns, name, overload = split_name(op)
    if not (name.endswith("_") and not name.endswith("__") and not name.startswith("_")):
        return op
    text = f"{ns}::{name[:-1]}" if ns else name[:-1]
    return f"{text}.{overload}" if overload else text


@functools.lru_cache(maxsize=None)
def may_alias(op: str) -> bool:
    """May ``op``'s Tensor result share memory with its first argument (views, and reshape / contiguous / to:
    schema ``Tensor(a) self -> Tensor(a)``)? List results (split, unbind) are not covered."""
    for o in _overloads(op):
        s = o._schema
        r = s.returns[0].alias_info if s.returns else None
        a = s.arguments[0].alias_info if s.arguments else None
        if r is not None and a is not None and not r.is_write and set(r.before_set) & set(a.before_set):
            return True
    return False


def is_mergeable(op: str) -> bool:
    """Do two calls of ``op`` with equal arguments give equal results? (Not a random op, not uninitialized
    memory: ops/overrides.py; an op torch does not know: no.) Effects are the node's business (Node.effectful)."""
    name = split_name(op).name
    return (bool(_overloads(op)) and not is_random(op) and not is_random(name)
            and not overrides.fact(name, "unmergeable"))


def _exists(op: str) -> bool:
    return bool(_overloads(op))


def _aliases_first(schema, list_result: bool) -> bool:
    """Does ``schema``'s first result share memory with its first argument, read only? A Tensor result:
    ``Tensor(a) self -> Tensor(a)``; with ``list_result`` a Tensor list, whose elements' alias sets torch's
    Python schema does not expose: ``Tensor(a -> *) self -> Tensor(a)[]`` (self's set joins the wildcard
    the list's elements are in)."""
    if not schema.returns or not schema.arguments:
        return False
    r, a = schema.returns[0], schema.arguments[0]
    if isinstance(r.type, torch.ListType) != list_result or a.alias_info is None or a.alias_info.is_write:
        return False
    if list_result:
        return "*" in a.alias_info.after_set
    return (r.alias_info is not None and not r.alias_info.is_write
            and bool(set(r.alias_info.before_set) & set(a.alias_info.before_set)))


@functools.lru_cache(maxsize=None)
def inplace_twin(op: str) -> str | None:
    """The in-place ATen op that computes what the pointwise ``op`` computes, into its first argument:
    ``sin`` -> ``sin_``, ``aten::add.Tensor`` -> ``add_`` (bare names). None unless ATen tags ``op``
    pointwise, not random, never a view of its input, and ``op_`` exists and writes its first argument
    (schema ``Tensor(a!) self``)."""
    name = split_name(op).name
    if not is_pointwise(op) or is_random(op) or may_alias(op) or name.endswith("_"):
        return None
    twin = name + "_"
    return twin if _exists(twin) and is_inplace(twin) and not is_random(twin) else None


@functools.lru_cache(maxsize=None)
def is_fresh(op: str) -> bool:
    """Does every call of ``op`` return new memory (never its input or a view of it)? Its schemas declare no
    aliased or written argument, and either ATen tags it ``pointwise`` / ``reduction`` (TensorIterator
    allocates the result) or ops/overrides.py lists it ("fresh": composite ops the tags do not cover).
    Default-deny: an unannotated op without a tag (``dropout`` returns its input in eval mode,
    ``_unsafe_view`` shares storage) is not fresh."""
    found = [o for o in _overloads(op)]
    if not found or any(_writes_first(o._schema) or _aliases_first(o._schema, False)
                        or _aliases_first(o._schema, True) for o in found):
        return False
    name = split_name(op).name
    return (is_pointwise(op) or _tagged(op, torch.Tag.reduction) or bool(overrides.fact(name, "fresh")))


@functools.lru_cache(maxsize=None)
def splits_into_views(op: str) -> bool:
    """Does ``op`` return a list of views of its first argument (``Tensor(a) self -> Tensor(a)[]``: split,
    chunk, unbind, tensor_split, hsplit, ...)? Their count follows the input's size or a Python argument.
    ``unsafe_split`` / ``unsafe_chunk`` (the same pieces, with the annotation left off) count as their safe
    twin."""
    name = split_name(op).name
    if name.startswith("unsafe_"):
        return splits_into_views(name[len("unsafe_"):])
    return any(_aliases_first(o._schema, True) for o in _overloads(op))
