"""0-d integer tensors where an op takes ints: read with a recorded ``aten::item``.

``torch.div(n, 8, rounding_mode="trunc")`` of two Python ints is a 0-d tensor, and Python's argument parser takes
such a tensor where an op wants an int: transformers' Longformer / LED chunk with
``x.view(x.size(0), torch.div(x.size(1), 2 * w, rounding_mode="trunc"), 2 * w, x.size(2))``. The trace recorded the
tensor itself as a size of ``view``, which no schema binds: ``save`` refused the program. The conversion the
parser makes is recorded instead, as ``aten::item`` (the argument parser's ``int(t)``), whose int the op takes: the
size still follows the input, a file's size rules see it as an int at call time, and the generated code states it.

Only where every schema of the op takes an int there (an ``int`` / ``SymInt`` parameter, an element of an int
list, ``view``'s sizes written as separate arguments): a 0-d tensor where some schema takes a tensor
(``div(x, t)``) stays a tensor.
"""
from __future__ import annotations

from ..ir import Node, ScalarType, Value
from ..ir import target as call_target
from ..ops import schemas_of

_INTS = ("int", "SymInt", "List[int]", "List[SymInt]", "Optional[int]", "Optional[SymInt]", "Optional[List[int]]")


def _int_tensor(v) -> bool:
    t = getattr(v, "type", None) if isinstance(v, Value) else None
    return t is not None and getattr(t, "shape", None) == () and not t.dtype.is_floating_point \
        and not t.dtype.is_complex and t.dtype.is_signed is not None and str(t.dtype) != "torch.bool"


def _holds_int_tensor(v) -> bool:
    return _int_tensor(v) or (isinstance(v, (list, tuple)) and any(_int_tensor(x) for x in v))


def _param_types(op: str, position: int, n_args: int, name: str | None) -> set:
    """The parameter types every schema of ``op`` gives argument ``position`` (or keyword ``name``) of a call with
    ``n_args`` positional arguments (an int list's elements written as separate arguments: that list's type)."""
    types = set()
    for _, schema in schemas_of(op):
        params = [a for a in schema.arguments if not a.kwarg_only] if name is None else \
            [a for a in schema.arguments if a.name == name]
        if name is not None:
            types.update(str(a.type) for a in params)
            continue
        if position < len(params):
            types.add(str(params[position].type))
        elif params and str(params[-1].type) in ("List[int]", "List[SymInt]") and n_args > len(params):
            types.add("List[int]")
    return types


def read_ints(graph, op: str, args: tuple, kwargs: dict, source) -> tuple[tuple, dict]:
    """``(args, kwargs)`` with each 0-d integer tensor Value that stands where ``op`` takes an int replaced by the
    int of an ``aten::item`` node added to ``graph``."""
    if not op.startswith("aten::") or not (any(_holds_int_tensor(a) for a in args[1:])
                                           or any(_holds_int_tensor(v) for v in kwargs.values())):
        return args, kwargs

    def read(v):
        if _int_tensor(v):
            node = Node("aten::item", call_target.method("item"), (v,), source=source)
            graph.add_node(node, [ScalarType("int")], dynamic=True)
            return node.outputs[0]
        if isinstance(v, (list, tuple)):
            return type(v)(read(x) for x in v)
        return v

    def fits(types) -> bool:
        return bool(types) and types <= set(_INTS)

    new_args = tuple(read(a) if i and _holds_int_tensor(a) and fits(_param_types(op, i, len(args), None)) else a
                     for i, a in enumerate(args))
    new_kwargs = {k: read(v) if _holds_int_tensor(v) and fits(_param_types(op, 0, 0, k)) else v
                  for k, v in kwargs.items()}
    return new_args, new_kwargs
