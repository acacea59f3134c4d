"""The generated function's parameters: bound from the graph's input spec, nested inputs unpacked.

With ``guards`` on, each input is checked on entry (a Tensor or an int where the trace had one,
the same constant, a container of the same kind and length) and a mismatch calls
``_input_error(where, value, expected, kind)``. ``gen`` is the ``CodeGen`` (codegen/python.py).
"""
from __future__ import annotations

import torch

from ..support.const_args import ConstArgument

from ..ir import Value
from ..pytree import REGISTERED, Spec
from ..support.guards import check_input_kind
from . import capture_emit


def signature(gen) -> list[str]:
    """Parameters from the input spec; unpack nested inputs; guard them when asked.

    Positional arguments of the trace stay positional; keyword arguments become keyword-only
    parameters (so a positional call cannot silently swap them); values a submodule used
    from its caller's scope come last as keyword-only ``_capture_<i>``.
    """
    g = gen.graph
    spec: Spec = g.in_spec
    leaves = iter(g.input_leaves)
    names = iter(g.arg_names)
    tops = iter(g.param_names)
    args_spec, kwargs_spec = spec.children
    params = [bind_param(gen, c, leaves, names, next(tops)) for c in args_spec.children]
    keyword = [bind_param(gen, c, leaves, names, next(tops)) for c in kwargs_spec.children]
    captures = [gen.namer.define(v, f"_capture_{i}")
                for i, v in enumerate(v for v in g.inputs if v.capture)]
    if keyword or captures:
        params += ["*"] + keyword + captures
    return params


def bind_param(gen, spec: Spec, leaves, names, top_name: str) -> str:
    if spec.kind == "leaf":
        leaf = next(leaves)
        hint = next(names)
        if isinstance(leaf, Value):
            pname = gen.namer.define(leaf, hint)
            guard_leaf(gen, pname, leaf, top_name)
            return pname
        pname = gen.fresh(hint)
        guard_const(gen, pname, leaf, top_name)
        return pname
    pname = gen.fresh(top_name)
    unpack(gen, pname, spec, leaves, names, top_name)
    return pname


def unpack(gen, expr: str, spec: Spec, leaves, names, where: str) -> None:
    if spec.kind == REGISTERED:
        expr = capture_emit.registered_children(gen, expr, spec, where)
    elif gen.guards:
        guard_container(gen, expr, spec, where)
    keys = spec.keys if spec.kind == "dict" else range(len(spec.children))
    for k, child in zip(keys, spec.children):
        sub = f"{expr}[{k!r}]"
        sub_where = f"{where}[{k!r}]"
        if child.kind == "leaf":
            leaf = next(leaves)
            hint = next(names)
            if isinstance(leaf, Value):
                name = gen.namer.define(leaf, hint)
                gen.emit(f"{name} = {sub}")
                guard_leaf(gen, name, leaf, sub_where)
            else:
                guard_const(gen, sub, leaf, sub_where)
        else:
            inner = gen.fresh(_container_hint(child, None))
            gen.emit(f"{inner} = {sub}")
            unpack(gen, inner, child, leaves, names, sub_where)


def guard_leaf(gen, name: str, v: Value, where: str) -> None:
    if not gen.guards:
        return
    if v.type is not None and hasattr(v.type, "shape"):
        # no rank check here: a guard checks the rank where the trace read it (tracejit::guard)
        # type(x) is Tensor, not isinstance: a subclass or Python attributes may be read unseen (trace/boundary.py)
        gen.globals["_tj_input_kind"] = check_input_kind
        gen.emit(f"if type({name}) is not Tensor or {name}.__dict__: "
                 f"_tj_input_kind({where!r}, {name}, _input_error)")
    else:
        gen.emit(f"if not isinstance({name}, int): _input_error({where!r}, {name}, 'int', None)")


def guard_const(gen, expr: str, const, where: str) -> None:
    if not gen.guards:
        return
    if const is None:
        gen.emit(f"if {expr} is not None: _input_error({where!r}, {expr}, None, 'const')")
    elif isinstance(const, (bool, int, float, str)):
        lit = gen.expr(const)
        gen.emit(f"if {expr} != {lit}: _input_error({where!r}, {expr}, {lit}, 'const')")
    elif type(const) in _INLINE:   # what a file may hold: inline, no new global (a loaded program stays cacheable)
        lit = gen.expr(const)
        gen.emit(f"if {expr}.__class__ is not {_INLINE[type(const)]} or {expr} != {lit}: "
                 f"_input_error({where!r}, {expr}, {lit}, 'const')")
    else:   # an enum, a function, a config object...: support/const_args.py (default-deny)
        check = gen.const_global(ConstArgument(const))
        gen.emit(f"if {check}.differs({expr}): _input_error({where!r}, {expr}, {check}.const, 'const')")


# constants of these types are compared inline (their class by the name generated code reads it by)
_INLINE = {torch.dtype: "torch.dtype", torch.device: "torch.device", torch.layout: "torch.layout",
           torch.memory_format: "torch.memory_format", complex: "complex"}


def guard_container(gen, expr: str, spec: Spec, where: str) -> None:
    n = len(spec.children)
    if spec.kind in ("tuple", "namedtuple"):
        cond = f"not isinstance({expr}, tuple) or len({expr}) != {n}"
    elif spec.kind == "list":
        cond = f"not isinstance({expr}, list) or len({expr}) != {n}"
    else:
        read_at = dict(getattr(gen.graph, "exact_keys", ())).get(where)
        if read_at is not None:   # forward read the key set (trace/input_keys.py): these keys, in this order
            keys = "[" + ", ".join(repr(k) for k in spec.keys) + "]"
            gen.emit(f"if not isinstance({expr}, dict) or list({expr}) != {keys}: "
                     f"_input_error({where!r}, {expr}, {(_spec_text(spec), read_at)!r}, 'keys')")
            return
        # the keys in spec order, so the text is the same every run ("set()" for none)
        keys = "{" + ", ".join(repr(k) for k in spec.keys) + "}" if spec.keys else "set()"
        cond = f"not isinstance({expr}, dict) or not {expr}.keys() >= {keys}"  # extra keys ignored
    gen.emit(f"if {cond}: _input_error({where!r}, {expr}, {_spec_text(spec)!r}, 'container')")


def _container_hint(spec: Spec, names) -> str:
    return {"tuple": "tup", "namedtuple": "tup", "list": "lst", "dict": "dct"}.get(spec.kind, "arg")


def _spec_text(spec: Spec) -> str:
    return spec.describe(iter(["Tensor"] * spec.num_leaves))
