"""Run onnxscript's torch_lib functions so that they write ONNX nodes into an onnx-ir graph.

torch_lib's functions are written against ``onnxscript.opset18``: each ``op.X(...)`` asks the
current onnxscript evaluator to run X. ``Recorder`` is that evaluator: it hands every op to
onnxscript's ``GraphBuilder`` (schema-aware input/attribute split, Python constants promoted to
the right dtype, per-node shape inference), so the conversions themselves all come from torch_lib.
"""
from __future__ import annotations

from collections.abc import Sequence

from ._deps import require

ir = require("onnx_ir")
require("onnxscript")
from onnxscript._internal.builder import GraphBuilder  # noqa: E402
from onnxscript._internal import evaluator as _evaluator  # noqa: E402
from onnxscript._internal import param_manipulation as _param_manipulation  # noqa: E402


_SIGNATURES: dict = {}


def _signature(schema):
    """onnx_ir's signature of an ONNX op schema, converted once per (domain, op, version)."""
    key = (schema.domain, schema.name, schema.since_version)
    found = _SIGNATURES.get(key)
    if found is None:
        found = _SIGNATURES[key] = ir.schemas.OpSignature.from_op_schema(schema)
    return found


def output_count(op, kwargs: dict) -> int:
    """How many outputs a node of ONNX op ``op`` gets (the schema's count, except where torch_lib
    expects fewer: BatchNormalization in inference mode, Split with num_outputs)."""
    schema = op.op_schema
    if op.domain == "" and op.name == "BatchNormalization" and not kwargs.get("training_mode", 0):
        return 1
    if op.domain == "" and op.name == "Split" and isinstance(kwargs.get("num_outputs"), int):
        return kwargs["num_outputs"]
    return len(schema.outputs) if schema is not None else 1


class NamingGraphBuilder(GraphBuilder):
    """GraphBuilder whose initializers always have a (unique) name (torch_lib passes unnamed tensors),
    and that converts each ONNX op schema to its input/attribute signature once, not once per node
    (that conversion was a third of export's time: 0.3 ms a node)."""

    def _partition_inputs_attributes(self, schema, args, kwargs):
        if schema is None:
            return args, kwargs
        return _param_manipulation.separate_input_attributes_from_arguments(
            _signature(schema), list(args), kwargs, fill_defaults=False, allow_extra_args=False)

    def initializer(self, tensor, name=None, *, qualify=True):
        if name is None and not getattr(tensor, "name", None):
            name, qualify = f"const_{len(self._root._graph.initializers)}", False
            while name in self._root._graph.initializers:
                name += "_"
        return super().initializer(tensor, name, qualify=qualify)


class Recorder:
    """An onnxscript evaluator that records ops into ``builder``'s graph."""

    def __init__(self, builder: GraphBuilder):
        self.builder = builder

    def eval_op(self, op, args: Sequence, kwargs: dict):
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        args = [self._pack(a) for a in args]
        return self.builder.call_op(op.name, list(args), kwargs, domain=op.domain, version=op.opset.version,
                                    outputs=output_count(op, kwargs))

    def _pack(self, arg):
        """A Python list mixing traced sizes and numbers (``[n, 1]``) as one 1-D tensor: a Concat."""
        if not isinstance(arg, (list, tuple)) or not any(isinstance(x, ir.Value) for x in arg):
            return arg
        dtype = next(x.dtype for x in arg if isinstance(x, ir.Value))
        parts = []
        for x in arg:
            if isinstance(x, ir.Value):
                parts.append(self.builder.call_op("Reshape", [x, [-1]], {}, version=18))
            else:
                parts.append(self.builder._get_or_create_constant([x], dtype))
        return self.builder.call_op("Concat", parts, {"axis": 0}, version=18)

    def eval_function(self, function, args: Sequence, kwargs: dict):
        """A scripted (not trace-only) torch_lib function: inline its body."""
        inputs, attrs = split_inputs_attributes(function.op_signature, list(args), dict(kwargs))
        values = [self.builder._input_to_ir_value(v) if not isinstance(v, ir.Value) else v for v in inputs]
        return inline(self.builder, function, values, attrs)

    # ``a + b``, ``-a`` ... on values inside trace-only torch_lib functions (aten_trunc, aten_atan2)
    def Add(self, lhs, rhs):  # noqa: N802  (onnx_ir's handler protocol names)
        return self._binary("Add", lhs, rhs)

    def Sub(self, lhs, rhs):  # noqa: N802
        return self._binary("Sub", lhs, rhs)

    def Mul(self, lhs, rhs):  # noqa: N802
        return self._binary("Mul", lhs, rhs)

    def Div(self, lhs, rhs):  # noqa: N802
        return self._binary("Div", lhs, rhs)

    def Neg(self, operand):  # noqa: N802
        return self.builder.call_op("Neg", [operand], {}, version=18)

    def _binary(self, name: str, lhs, rhs):
        like = lhs if isinstance(lhs, ir.Value) else rhs
        lhs, rhs = (x if isinstance(x, ir.Value) else self.builder._get_or_create_constant(x, like.dtype)
                    for x in (lhs, rhs))
        return self.builder.call_op(name, [lhs, rhs], {}, version=18)

    def __enter__(self):
        self._cm = _evaluator.default_as(self)
        self._cm.__enter__()
        self._old_handler = ir.set_value_magic_handler(self)
        return self

    def __exit__(self, *exc):
        ir.set_value_magic_handler(self._old_handler)
        return self._cm.__exit__(*exc)


def inline(builder, function, values: list, attrs: dict):
    """``function``'s body inlined with ``values`` as inputs; its attribute references resolved from
    ``attrs`` (the inliner reads ``ir.Attr`` objects, typed by the function's signature)."""
    params = function.op_signature.params_map
    typed = {name: ir.convenience.convert_attribute(name, value, attr_type=params[name].type)
             if name in params and not isinstance(value, ir.Attr) else value for name, value in attrs.items()}
    return builder.call_inline(function, *values, **typed)


def split_inputs_attributes(signature, args: list, kwargs: dict) -> tuple[list, dict]:
    """Inputs (in order) and attributes of a call of a function with ``signature``."""
    inputs, attrs = [], {}
    rest = list(args)
    for param in signature.params:
        if rest:
            value = rest.pop(0)
        elif param.name in kwargs:
            value = kwargs[param.name]
        else:
            value = _default(param)
        if isinstance(param, ir.schemas.AttributeParameter):
            if value is not None:
                attrs[param.name] = value.value if isinstance(value, ir.Attr) else value
        else:
            inputs.append(value)
    while inputs and inputs[-1] is None:
        inputs.pop()
    return inputs, attrs


def _default(param):
    default = getattr(param, "default", None)
    if default is None or isinstance(default, ir.schemas._Empty):
        return None
    return default
