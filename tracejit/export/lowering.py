"""Lower one tracejit IR node to ONNX nodes, through onnxscript's torch_lib.

For ``aten::name.overload`` the registry of torch_lib (onnxscript's ATen-to-ONNX function
library) is asked for ``aten::name.overload`` and then ``aten::name``; tracejit's own table
(special_ops.py) comes first for the few ops it records in another form. Arguments are put in
the ATen schema's order, Python constants become constants of the right dtype, and tensor
inputs of elementwise ops are cast to the dtype torch's type promotion gives.
"""
from __future__ import annotations

import functools
import types
import typing
from collections.abc import Sequence

import torch

from ..ir import Node, TensorType, Value, iter_values
from ..ops import accumulates, is_dropout, is_pointwise
from ..ops.names import AUTOGRAD_FUNCTION, CAPTURE_OPS, RNG_OPS, STATE_READS, OpName, split_name
from ._deps import require
from .dtypes import SCALAR_TO_ONNX, onnx_dtype
from .errors import RNG_REFUSAL, ExportError
from .recorder import inline, split_inputs_attributes
from .schema_args import bind, node_args
from .special_ops import HANDLERS
from .torch_lib_lookup import lookup
from . import attention, edge_values, fft, grouped_mm, recurrent, strided, sym_lowering, torch_lib_fixes, unlisted_ops, vision_ops  # noqa: E402,F401  (register their handlers)
from . import convolution, fusable_forms, guard_checks, guard_outputs, sequences, view_writes  # noqa: E402,F401  (handlers register)
from . import index_checks  # noqa: E402,F401  (registers the gathers' handlers)

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402
from onnxscript._internal.values import TracedOnnxFunction  # noqa: E402


class Lowering:
    """Converts IR nodes in order; ``env`` maps IR Values to ONNX values."""

    def __init__(self, builder, tensors_of, graph):
        self.builder = builder
        self.position = {id(n): i for i, n in enumerate(graph.nodes)}
        self.last_use: dict[int, int] = {}
        for i, n in enumerate(graph.nodes):
            for v in n.input_values():
                self.last_use[id(v)] = i
        for v in iter_values(graph.outputs):
            self.last_use[id(v)] = len(graph.nodes)
        self.env: dict[int, object] = {}
        self.tensors_of = tensors_of   # node -> torch.Tensor for get_attr / constant nodes
        self._initializers: dict = {}  # name -> the initializer's value (one per tensor)
        self.dtypes: dict[int, torch.dtype] = {}   # dtype_of outputs -> the torch dtype
        self._written: dict = {}   # id(in-place node) -> (written value, its chain of views)
        self.alias_roots = view_writes.alias_roots(graph)   # views -> the tensor they view
        self.layouts = strided.traced_layouts(graph)   # id(Value) -> the strides the trace read (strided.py)
        self.guard_values: dict | None = None   # id(guard node) -> its boolean, for the guards made outputs
        self.guard_checks = None   # the size guards the graph checks (guard_checks.GuardChecks)
        self.index_checks = None   # None, "raise" or "report": gathered indices' range (index_checks.py)
        self.index_flags: list = []   # "report": one boolean per checked index tensor
        self.loop_free = False   # no Loop building a sequence where another form exists (grouped_mm.py)
        self.nodes = graph.nodes   # the graph's nodes (fft.py reads who reads a complex result)
        self.pairs: set = set()   # id(Value) of complex results held as (real, imaginary) pairs (fft.py)

    # ------------------------------------------------------------------ args
    def arg(self, a):
        if isinstance(a, Value):
            try:
                value = self.env[id(a)]
            except KeyError:
                raise ExportError("a value is used before it is defined (malformed graph)") from None
            return value if self.guard_checks is None else self.guard_checks.read(a, value, self.env)
        if isinstance(a, (list, tuple)):
            return [self.arg(x) for x in a]
        if isinstance(a, torch.dtype):
            return int(onnx_dtype(a))
        if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
            return str(a)
        return a

    # ------------------------------------------------------------------ nodes
    def lower(self, node: Node) -> None:
        try:
            results = self._lower(node)
        except ExportError:
            raise
        except NotImplementedError as e:
            raise ExportError(f"cannot export {node.op} to ONNX: {e}", node.op, node.source) from e
        except Exception as e:  # noqa: BLE001  (torch_lib / onnx errors get the op and source line)
            raise ExportError(f"converting {node.op} to ONNX failed: {type(e).__name__}: {e}", node.op,
                              node.source) from e
        self._bind_outputs(node, results)
        written = self._written.pop(id(node), None)
        if written is not None:   # an in-place op: the tensor it wrote and every view of it change
            target, chain = written
            out = node.outputs[0] if node.outputs else None
            first = results if isinstance(results, ir.Value) else results[0]   # torch_lib: a Value or a list
            new_value = self.env[id(out)] if out is not None else self._typed(first, target)
            view_writes.write_back(self, target, chain, new_value)

    def _lower(self, node: Node):
        if node.op == "tracejit::guard":   # checked at the entry, listed as unchecked (guards.py) or an output
            if self.guard_values is not None and id(node) in self.guard_values:
                self.guard_values[id(node)] = guard_outputs.lower_guard(self, node)
            if self.guard_checks is not None:   # checked in the graph, where the trace checked it (guard_checks.py)
                self.guard_checks.at_guard(self, node)
            return []
        if node.op in STATE_READS:
            return [self._initializer(node)]
        if node.op == "tracejit::getitem":
            container, index = node.args
            return [self.arg(container)[index]]
        if node.op in CAPTURE_OPS:
            return [self._capture(node)]
        if node.op == "tracejit::call_module":
            raise ExportError("submodule call left in the graph; export works on the inlined graph", node.op,
                              node.source)
        if node.op == "tracejit::sym_math":   # float math on sizes (export/sym_lowering.py)
            return HANDLERS[node.op](self, node, [self.arg(a) for a in node.args], {})
        if node.op in RNG_OPS or any(isinstance(a, torch.Generator) for a in (*node.args, *node.kwargs.values())):
            raise ExportError(RNG_REFUSAL[node.op in RNG_OPS], node.op, node.source)
        if node.op == AUTOGRAD_FUNCTION:   # a custom autograd Function: its forward's ops, converted before it
            produced = iter(self.arg(list(node.args[1])))   # (an ONNX model has no backward to keep)
            if node.attrs.get("unpack") is None:
                return [next(produced)]
            return [next(produced) if v is not None else None for v in node.outputs]
        if node.op.startswith("tracejit::"):
            raise ExportError(f"no ONNX conversion for tracejit op '{node.op}'", node.op, node.source)
        op_name = self._functional(node)
        if op_name.endswith(".Scalar") and any(isinstance(a, Value) and not isinstance(a.type, TensorType)
                                               for a in node.args[1:]):
            op_name = op_name[:-len("Scalar")] + "Tensor"   # a traced size as the scalar: a 0-d tensor
        args, kwargs = node_args(node, op_name)
        args = [self.arg(a) for a in args]
        kwargs = {k: self.arg(v) for k, v in kwargs.items()}
        args = self._promote(node, args)
        handler = HANDLERS.get(op_name)
        if handler is not None:
            return handler(self, node, args, kwargs)
        fn = lookup(op_name)
        if fn is None:
            raise ExportError(f"no ONNX conversion for ATen op '{node.op}': neither onnxscript's torch_lib nor "
                              "tracejit's table (tracejit/export/special_ops.py) has one", node.op, node.source)
        return self._call_torch_lib(fn, args, kwargs)

    def _functional(self, node: Node) -> str:
        """The op to convert: ``aten::add_.Tensor`` becomes ``aten::add.Tensor``, and its result is written
        back into the tensor and the views it wrote (view_writes.py) once the node is converted."""
        ns, name, overload = split_name(node.op)
        if not (node.effectful or (name.endswith("_") and not name.startswith("_"))):
            return node.op
        functional = OpName(ns, name[:-1], overload).qualified if name.endswith("_") else node.op
        if is_dropout(name) and not bind(node.op, node.args, node.kwargs)[0][2]:
            return functional   # in eval mode an in-place dropout writes nothing
        target = node.args[0] if node.args else None
        if not isinstance(target, Value):
            raise ExportError(f"cannot export the in-place op {node.op}: it writes no traced tensor", node.op,
                              node.source)
        try:
            chain = view_writes.check_writable(self, node, target)
        except view_writes.WriteError as e:
            raise ExportError(f"cannot export the in-place op {node.op}: {e}", node.op, node.source) from None
        self._written[id(node)] = (target, chain)
        return functional

    def call_aten(self, op_name: str, args: list, kwargs: dict | None = None):
        """Convert ``op_name`` applied to already-converted ``args`` with torch_lib's function for it."""
        return self._call_torch_lib(lookup(op_name), args, kwargs or {})

    def _capture(self, node: Node):
        """dtype / device / finfo read from a traced value: fixed in an ONNX model (its input dtypes are)."""
        if node.op == "tracejit::device_of":
            return "cpu"
        if node.op == "tracejit::dtype_of":
            dtype = node.args[0].type.dtype
            self.dtypes[id(node.outputs[0])] = dtype
            return int(onnx_dtype(dtype))
        arg = node.args[0] if node.args else None
        dtype = self.dtypes.get(id(arg)) if isinstance(arg, Value) else arg
        if not isinstance(dtype, torch.dtype):
            raise ExportError("torch.finfo of a dtype the exporter cannot resolve", node.op, node.source)
        info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
        return getattr(info, node.attrs["attr"])

    def _initializer(self, node: Node):
        """One initializer per tensor: nodes reading the same constant (tied weights) share it."""
        name = node.attrs.get("path") or f"constant_{node.attrs.get('index', 0)}"
        if name not in self._initializers:
            self._initializers[name] = self._new_initializer(node, name)
        return self._initializers[name]

    def _new_initializer(self, node: Node, name: str):
        tensor = self.tensors_of(node).detach()
        if tensor.device.type not in ("cpu", "meta"):   # a CUDA program's weights: ONNX holds host bytes
            tensor = tensor.cpu()
        return self.builder.initializer(ir.tensor(tensor.contiguous().numpy() if tensor.dtype != torch.bfloat16
                                                  else tensor, name=name), name=name, qualify=False)

    def _promote(self, node: Node, args: list) -> list:
        """Cast tensor operands to the dtype torch computes in: of an elementwise op (ATen's pointwise tag) the
        result's dtype, or for a bool result (a comparison) the operands' promoted type; of an accumulating op
        (``ops.accumulates``: sum, mean, cumsum, ... with ``dtype=``) the input, to the result's dtype."""
        name = node.name
        if name.endswith("_"):
            name = name[:-1]
        accumulating = accumulates(name)
        if not accumulating and not is_pointwise(name):
            return args
        out_type = node.outputs[0].type if node.outputs and node.outputs[0] is not None else None
        if not isinstance(out_type, TensorType):
            return args
        if out_type.dtype == torch.bool and not accumulating:   # a comparison: computed in the operands' type
            target = _result_type(node.args[:2])
        else:
            target = out_type.dtype
        if target is None:
            return args
        want = onnx_dtype(target)
        skip = {0} if name == "where" else {1} if name == "masked_fill" else set()
        if accumulating:
            skip = set(range(1, len(args)))   # only the accumulated tensor: bool / int sums give int64
        return [op.Cast(a, to=want) if (i not in skip and isinstance(a, ir.Value) and a.dtype is not None
                                        and a.dtype != want) else a
                for i, a in enumerate(args)]

    def _call_torch_lib(self, fn, args: list, kwargs: dict):
        signature = fn.op_signature
        inputs, attrs = _named(signature, args, kwargs)
        traced = isinstance(fn, TracedOnnxFunction)
        python = _python_params(fn) if traced else frozenset()
        inputs = {**_constants_for_inputs(self.builder, signature, {k: v for k, v in inputs.items() if k not in python},
                                          keep_lists=traced),
                  **{k: v for k, v in inputs.items() if k in python}}
        if traced:
            return fn.func(**inputs, **attrs)
        values, attrs2 = split_inputs_attributes(signature, list(inputs.values()), attrs)
        return inline(self.builder, fn, values, attrs2)

    def _bind_outputs(self, node: Node, results) -> None:
        outs = [v for v in node.outputs]
        if isinstance(results, ir.Value) or not isinstance(results, Sequence):
            results = [results]
        results = list(results)
        if len(results) == 1 and isinstance(results[0], ir.Value) and (len(outs) > 1 or _is_sequence(results[0])):
            seq = results[0]   # a sequence (SplitToSequence, also of one piece: a split of batch 1): its items
            results = sequences.unpack(self.builder, seq, len(outs))
        for i, v in enumerate(outs):
            if v is None:
                continue
            if i >= len(results) or results[i] is None:
                raise ExportError(f"the ONNX conversion of {node.op} gave {len(results)} output(s); the trace has "
                                  f"{len(outs)}", node.op, node.source)
            self.env[id(v)] = self._typed(results[i], v)

    def _typed(self, value, v: Value):
        """Make the ONNX value carry the traced dtype (a Cast where torch_lib chose another) and rank."""
        if not isinstance(value, ir.Value) or id(v) in self.pairs:   # complex as (real, imaginary) pairs: fft.py
            return value
        t = v.type
        want = onnx_dtype(t.dtype) if isinstance(t, TensorType) else SCALAR_TO_ONNX.get(getattr(t, "kind", ""))
        if want is None:
            return value
        if value.dtype is not None and value.dtype != want:
            value = op.Cast(value, to=want)
        if value.type is None:
            value.type = ir.TensorType(want)
        rank = len(t.shape) if isinstance(t, TensorType) else 0
        if value.shape is None or len(value.shape) != rank:
            value.shape = ir.Shape([None] * rank)
        return value


def _is_sequence(value) -> bool:
    return isinstance(value.type, ir.SequenceType) or getattr(value.producer(), "op_type", "") == "SplitToSequence"


def _result_type(operands) -> torch.dtype | None:
    """torch's promoted dtype of (tensor or scalar) operands, on meta tensors."""
    metas = []
    for a in operands:
        if isinstance(a, Value) and isinstance(a.type, TensorType):
            metas.append(torch.empty(a.type.shape, dtype=a.type.dtype, device="meta"))
        elif isinstance(a, Value):
            metas.append({"int": 1, "float": 1.0, "bool": True}.get(a.type.kind, 1))
        elif isinstance(a, (bool, int, float)):
            metas.append(a)
    if len(metas) < 2 or not any(isinstance(m, torch.Tensor) for m in metas):
        return None
    if not isinstance(metas[0], torch.Tensor):
        metas[0], metas[1] = metas[1], metas[0]
    return torch.result_type(metas[0], metas[1])


def _named(signature, args: list, kwargs: dict) -> tuple[dict, dict]:
    """{input name: value}, {attribute name: value} for a torch_lib function (unknown kwargs dropped)."""
    inputs, attrs = {}, {}
    rest = list(args)
    for param in signature.params:
        if isinstance(param, ir.schemas.Parameter) and param.variadic and rest:
            inputs[param.name] = list(rest)
            rest = []
            continue
        if rest:
            value, given = rest.pop(0), True
        elif param.name in kwargs:
            value, given = kwargs[param.name], True
        else:
            value, given = None, False
        if isinstance(param, ir.schemas.AttributeParameter):
            if given and value is not None:
                attrs[param.name] = float(value) if param.type == ir.AttributeType.FLOAT and isinstance(value, int) \
                    else value
        elif given or not param.required:
            if given or value is not None:
                inputs[param.name] = value
        else:
            raise TypeError(f"missing required input '{param.name}'")
    return inputs, attrs


_PYTHON_TYPES = (int, float, bool, str)


@functools.lru_cache(maxsize=None)
def _python_params(fn) -> frozenset:
    """Parameters a trace-only torch_lib function annotates as Python values (``dim: Optional[int]``,
    ``rounding_mode: Optional[str]``): it reads them in Python, so they are passed as they are, not
    as ONNX constants (which it would put where an attribute belongs)."""
    try:
        hints = typing.get_type_hints(fn.func)
    except Exception:  # noqa: BLE001  (an annotation that does not resolve: keep the constants)
        return frozenset()

    def python(t) -> bool:
        if t in _PYTHON_TYPES:
            return True
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return typing.get_origin(t) in (typing.Union, types.UnionType, list, tuple, Sequence) \
            and bool(args) and all(python(a) or a is Ellipsis for a in args)
    return frozenset(name for name, t in hints.items() if name != "return" and python(t))


def _constants_for_inputs(builder, signature, inputs: dict, keep_lists: bool) -> dict:
    """Python numbers / lists given for tensor inputs become ONNX constants (dtype from the other inputs
    of the same type constraint); a list mixing traced sizes and numbers becomes a Concat."""
    binding = {}
    for name, value in inputs.items():
        param = signature.params_map[name]
        if isinstance(value, ir.Value) and value.dtype is not None:
            binding.setdefault(param.type_constraint, value.dtype)
    out = {}
    for name, value in inputs.items():
        param = signature.params_map[name]
        sequence_param = all(isinstance(t, ir.SequenceType) for t in param.type_constraint.allowed_types)
        if value is None or isinstance(value, ir.Value) or param.variadic or sequence_param:
            out[name] = value
            continue
        dtype = binding.get(param.type_constraint)
        allowed = param.type_constraint.allowed_types
        if dtype is None and len(allowed) == 1:
            dtype = next(iter(allowed)).dtype
        if isinstance(value, (list, tuple)):
            if any(isinstance(x, ir.Value) for x in value):
                parts = [op.Reshape(x, [-1]) if isinstance(x, ir.Value)
                         else builder._get_or_create_constant([x], dtype or ir.DataType.INT64) for x in value]
                out[name] = op.Concat(*parts, axis=0)
                continue
            if keep_lists and value:
                out[name] = list(value)   # trace-only functions read len(); onnxscript promotes it when used
                continue
            if dtype is None:
                dtype = ir.DataType.FLOAT if any(isinstance(x, float) for x in value) else ir.DataType.INT64
            out[name] = builder._get_or_create_constant(list(value), dtype) if value else \
                builder.initializer(ir.tensor([], dtype=ir.DataType.INT64))
            continue
        if dtype is None:
            dtype = ir.DataType.BOOL if isinstance(value, bool) else \
                ir.DataType.FLOAT if isinstance(value, float) else ir.DataType.INT64
        out[name] = builder._get_or_create_constant(value, dtype)
    return out
