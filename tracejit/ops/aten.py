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
    has_data_dependent_shape(op)  ATen tags it ``dynamic_output_shape`` (nonzero, masked_select, index.Tensor, ...;
                         + overrides: the one-argument where)
    pieces_follow_size(op)  a split whose count of pieces the call does not state (split, unbind, ...)
    shares_memory(op)    may_alias or splits_into_views: its result may be its input's memory
    inplace_twin(op)     its in-place ATen twin (``sin`` -> ``sin_``) when it is pointwise, not random, not a view
    is_fresh(op)         every call returns new memory (no alias annotation; pointwise / reduction / overrides)
    splits_into_views(op)  returns a list of views of its first argument (``Tensor(a -> *) self -> Tensor[]``)
    accumulates(op)      reads its input into a result of a chosen dtype (keyword ``ScalarType? dtype``)
    is_reduction(op)     ATen tags it ``reduction``; gives_tensor(op): it returns a Tensor (``size`` does not)
    is_layout_free(op)   its values ignore its inputs' strides (pointwise, reductions, overrides)
    outgrows_inputs(op)  its result is sized by its arguments (expand, repeat, factories: overrides)
    takes_numbers_for_tensors(op)  a saved call may hold a number where the schema says Tensor (overrides)
    steps(op)            its result jumps at boundaries of its input (floor, sign, remainder: overrides)
    reads_metadata_only(op)  its result follows its input's shape / dtype / device only (size, zeros_like: overrides)
    reads_values_of(op, args)  the arguments whose values reach its result (expand_as: the first only; overrides)
    step_work(op)        its cost per element in multiply-adds (default, a view's copy, or an override)
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
def exact_overload(op: str):
    """The OpOverload of exactly the overload ``op`` names (``default`` when it names none), callable as torch's
    op; None if torch has no such overload."""
    ns, name, overload = split_name(op)
    found = _overloads(f"{ns or 'aten'}::{name}.{overload or 'default'}")
    return found[0] if found else None


@functools.lru_cache(maxsize=None)
def exact_schema(op: str):
    """The schema of exactly the overload ``op`` names (``default`` when it names none); None if torch has
    no such overload."""
    found = exact_overload(op)
    return found._schema if found is not None else None


def _tagged(op: str, tag) -> bool:
    return any(tag in o.tags for o in _overloads(op))


@functools.lru_cache(maxsize=None)
def has_data_dependent_shape(op: str) -> bool:
    """Does ATen tag ``op`` as giving a result whose shape depends on its inputs' values (``dynamic_output_shape``:
    nonzero, masked_select, unique, index.Tensor, repeat_interleave.Tensor, ...), or is it a kept custom op that
    does (ops/custom.py: torchvision's nms), or an untagged composite that calls nonzero (ops/overrides.py
    "data_dependent": the one-argument ``where``)? A bare name answers for any of its overloads."""
    if _tagged(op, torch.Tag.dynamic_output_shape) or custom.custom_data_dependent_shape(op):
        return True
    _, name, overload = split_name(op)
    listed = overrides.fact(name, "data_dependent")
    return bool(listed) and (not overload or overload in listed)


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
    """Does ATen tag ``op`` pointwise (each output element from the same-index input elements), or does
    ops/overrides.py ("pointwise": floor_divide, isclose, which ATen leaves untagged)?"""
    return _tagged(op, torch.Tag.pointwise) or bool(overrides.fact(split_name(op).name, "pointwise"))


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
    aliased or written argument, and either ATen tags its name ``pointwise`` / ``reduction`` (TensorIterator
    allocates the result) or ops/overrides.py lists it ("fresh": composite ops the tags do not cover).
    Default-deny: an unannotated op without a tag (``dropout`` returns its input in eval mode,
    ``_unsafe_view`` shares storage) is not fresh."""
    found = [o for o in _overloads(op)]
    if not found or any(_writes_first(o._schema) or _aliases_first(o._schema, False)
                        or _aliases_first(o._schema, True) for o in found):
        return False
    name = split_name(op).name   # the tags of the op's family: where.ScalarOther is untagged, where.self is
    return is_pointwise(name) or _tagged(name, torch.Tag.reduction) or bool(overrides.fact(name, "fresh"))


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


def takes_numbers_for_tensors(op: str) -> bool:
    """May a saved call of ``op`` hold a Python number where its schema says Tensor? Only where the reviewed
    table says so (ops/overrides.py "numbers_as_tensors": torch's Python binding, a Scalar overload); torch's
    own binding list (``torch._C._should_allow_numbers_as_tensors``) is a subset, and the schemas' Scalar
    overloads include TorchScript's number math (``acos.Scalar``), too wide for the loader: default-deny."""
    return bool(overrides.fact(split_name(op).name, "numbers_as_tensors"))


def _accumulator_schema(schema) -> bool:
    args = schema.arguments
    return (bool(args) and isinstance(args[0].type, torch.TensorType)
            and any(a.name == "dtype" and a.kwarg_only and str(a.real_type) == "Optional[ScalarType]" for a in args)
            and not any(a.name == "layout" for a in args))


@functools.lru_cache(maxsize=None)
def accumulates(op: str) -> bool:
    """Does ``op`` read its first argument's values into a result of a dtype the call may choose (a keyword
    ``ScalarType? dtype=``: sum, mean, prod, cumsum, cumprod, softmax, norms), torch casting the input to that
    dtype first? Factories with a dtype (``zeros_like``, ``new_zeros``, ``_to_copy``: their ``layout``
    argument) do not read values that way."""
    return any(_accumulator_schema(o._schema) for o in _overloads(op))


def outgrows_inputs(op: str) -> bool:
    """Is ``op``'s result sized by its arguments (expand, repeat, zeros, arange, ``*_like`` ...), so it may hold
    more than its tensor inputs? A reviewed fact (ops/overrides.py "outgrows"): torch's tags do not state it."""
    return bool(overrides.fact(split_name(op).name, "outgrows"))


@functools.lru_cache(maxsize=None)
def is_reduction(op: str) -> bool:
    """Does ATen tag ``op`` ``reduction`` (sum, mean, amax, std, argmax, ...)?"""
    return _tagged(op, torch.Tag.reduction)


@functools.lru_cache(maxsize=None)
def gives_tensor(op: str) -> bool:
    """Does one of ``op``'s schemas return a Tensor or a Tensor list (``size`` returns an int)?"""
    return any(isinstance(r.type, torch.TensorType) or (isinstance(r.type, torch.ListType)
                                                       and isinstance(r.type.getElementType(), torch.TensorType))
               for o in _overloads(op) for r in o._schema.returns)


@functools.lru_cache(maxsize=None)
def is_layout_free(op: str) -> bool:
    """Are ``op``'s result values the same whatever its inputs' strides (a channels-last feature map in, eager's
    values out)? Pointwise ops (TensorIterator: by index, not by memory order) that draw no random numbers
    (their draws follow memory order), reductions, and the reviewed "layout_free" overrides (conv2d, pooling,
    batch_norm, hardswish, padding, size, flatten, reshape, contiguous, dropout)."""
    name = split_name(op).name
    if overrides.fact(name, "layout_free"):
        return True
    return (is_pointwise(op) or is_reduction(op)) and not is_random(op)


def accepts_repeated_dims(op: str) -> bool:
    """May ``op``'s list of dimensions name one twice (``roll(x, [1, 1], [0, 0])``)? The reviewed "repeated_dims"
    overrides; every other op's kernel refuses a repeated dimension (serialize/op_dims.py refuses it at load)."""
    return bool(overrides.fact(split_name(op).name, "repeated_dims"))


def shares_memory(op: str) -> bool:
    """May ``op``'s result (or the tensors of its list result) share memory with its first argument? The
    schema's alias information: views, reshape / flatten / contiguous / to (a view when they can be),
    split / chunk / unbind."""
    return may_alias(op) or splits_into_views(op)


@functools.lru_cache(maxsize=None)
def pieces_follow_size(op: str) -> bool:
    """Does the number of tensors ``op`` returns follow its input's size, for the trace to fix? A split into
    views (``splits_into_views``) whose call does not state the count itself: ``chunk(x, chunks)`` and
    ``split_with_sizes(x, split_sizes)`` do (torch.jit.trace says nothing of them either)."""
    name = split_name(op).name
    if name.startswith("unsafe_"):
        return pieces_follow_size(name[len("unsafe_"):])
    return any(_aliases_first(o._schema, True) and not any(a.name in ("chunks", "split_sizes")
                                                           for a in o._schema.arguments) for o in _overloads(op))


def steps(op: str) -> bool:
    """Does ``op``'s result jump where its input crosses a boundary (floor, round, sign, remainder, ...: the
    reviewed "steps" overrides)? fp32 rounding of its input can then move its result by a whole step."""
    return bool(overrides.fact(split_name(op).name, "steps"))


def reads_metadata_only(op: str) -> bool:
    """Does ``op``'s result follow only its tensor input's shape, dtype or device (size, dim, ``zeros_like``,
    ``new_zeros``, ...: the reviewed "metadata_only" overrides), never its values?"""
    return bool(overrides.fact(split_name(op).name, "metadata_only"))


def reads_values_of(op: str, args: tuple) -> tuple:
    """The arguments of a call of ``op`` whose values reach its result: all of them, but only the first for
    ``x.expand_as(other)``, ``view_as``, ``reshape_as``, ``type_as`` (the reviewed "like_second" overrides)."""
    return tuple(args[:1]) if overrides.fact(split_name(op).name, "like_second") else tuple(args)


DEFAULT_STEP = 256   # multiply-adds' time per element of an op nobody measured (sin 150, pow 174, an add 87 at 2**24)
ALIAS_STEP = 32      # a view, or the copy a reshape / contiguous / to may make (a clone: 87 at 2**24, 16 cached)


@functools.lru_cache(maxsize=None)
def step_work(op: str) -> int:
    """What one element of ``op``'s largest tensor (its inputs' broadcast, or its output) costs, in multiply-adds of
    a blocked matrix product (support/call_budget.py sums it over a loaded program's call): ops/overrides.py's
    "step_work" where measured above the default, 0 for an op that returns no tensor (``size``), ALIAS_STEP for
    one whose result may be its input's memory (a view; a reshape may copy), else DEFAULT_STEP (default-deny: an
    op nobody measured costs as much as the dearer common ones). An in-place op costs its out-of-place form."""
    name = split_name(op).name
    listed = overrides.fact(name, "step_work") or overrides.fact(split_name(functional_of(op)).name, "step_work")
    if listed:
        return listed
    if _overloads(op) and not gives_tensor(op):
        return 0
    return ALIAS_STEP if shares_memory(op) else DEFAULT_STEP
