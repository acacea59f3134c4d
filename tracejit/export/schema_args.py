"""Put a node's Python-call arguments in the order of its ATen schema.

tracejit records the call as Python made it (``x.view(2, -1)``: sizes as varargs, ``x.sum(1)``; a method's tensor
first: ``x.where(mask, y)`` is ``where.self(mask, x, y)``); onnxscript's torch_lib functions take the ATen schema's
parameters (``view(self, size)``): ``node_args``.
"""
from __future__ import annotations

import functools

from ..ops import exact_schema


@functools.lru_cache(maxsize=None)
def aten_schema(op: str):
    """The ``torch._C.FunctionSchema`` of ``aten::name.overload``, or None when torch has none."""
    return exact_schema(op)


def bind(op: str, args: tuple, kwargs: dict) -> tuple[list, dict]:
    """(positional args, keyword-only args) in schema order; varargs sizes packed into one list.

    Without a schema the call is returned unchanged.
    """
    schema = aten_schema(op)
    if schema is None:
        return list(args), dict(kwargs)
    positional = [a for a in schema.arguments if not a.kwarg_only]
    args = list(args)
    if len(args) > len(positional) and positional:
        # varargs: x.view(2, -1), x.permute(0, 2, 1), x.new_zeros(n, 3) pack into the list parameter
        for i, arg in enumerate(positional):
            if _is_int_list(arg):
                extra = len(args) - len(positional)
                args = args[:i] + [list(args[i:i + extra + 1])] + args[i + extra + 1:]
                break
    out_args = []
    out_kwargs = {}
    for i, arg in enumerate(positional):
        if i < len(args):
            value = args[i]
        elif arg.name in kwargs:
            value = kwargs[arg.name]
        elif arg.has_default_value():
            value = arg.default_value
        else:
            break
        if _is_int_list(arg) and not isinstance(value, (list, tuple)) and value is not None \
                and not _is_tensor_value(value):
            # x.view(-1), x.sum(1): one size for an int[] parameter; int[2] repeats it (kernel_size=3)
            value = [value] * (arg.N or 1) if isinstance(arg.N, int) else [value]
        out_args.append(_floats(arg, value))
    for arg in schema.arguments:
        if arg.kwarg_only and arg.name in kwargs:
            out_kwargs[arg.name] = kwargs[arg.name]
    return out_args, out_kwargs


def node_args(node, op: str | None = None) -> tuple[list, dict]:
    """``bind`` of ``node``'s call: a method call passes its tensor first (``x.where(mask, y)``), where the schema may
    want it elsewhere (``where.self(condition, self, other)``): it is moved to the schema's ``self`` place first."""
    op = op or node.op
    args = tuple(node.args)
    target = node.target
    schema = aten_schema(op) if target is not None and target.kind == "method" and args else None
    if schema is not None:
        names = [a.name for a in schema.arguments if not a.kwarg_only]
        at = names.index("self") if "self" in names else 0
        if 0 < at < len(args):
            args = (*args[1:at + 1], args[0], *args[at + 1:])
    return bind(op, args, node.kwargs)


def _floats(arg, value):
    """A ``float[]`` parameter given Python ints (``interpolate(x, scale_factor=2)`` records ``scale_factors=[2, 2]``)
    as floats: torch_lib writes it as a float-list attribute, and a list of ints failed ("Unsupported attribute type:
    list", transformers' DPT / Depth Anything)."""
    if "List[float]" in str(arg.type) and isinstance(value, (list, tuple)) and value and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [float(v) for v in value]
    return value


def _is_int_list(arg) -> bool:
    return "List[int]" in str(arg.type)


def _is_tensor_value(value) -> bool:
    return hasattr(value, "type") and hasattr(value.type, "shape")
