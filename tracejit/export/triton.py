"""A Triton Inference Server model repository for the onnxruntime backend.

``write_repository(traced, "repo", name="mlp")`` writes::

    repo/mlp/config.pbtxt      # name, backend "onnxruntime", max_batch_size, inputs, outputs
    repo/mlp/1/model.onnx      # tracejit.export_onnx(traced)

and ``tritonserver --model-repository repo`` serves it. The config is Triton's ``ModelConfig``
message in protobuf text format, written by ``config_text`` (a few lines: tritonclient ships the
generated ``model_config_pb2`` but pins protobuf and ml-dtypes versions older than onnx's here,
and the text format of these few fields is simple). The names in the config are the ONNX model's
own (the traced argument names, ``output`` / ``output_<i>``), which are already identifiers.

Batching: dimension 0 is the batch axis Triton batches on when every input and output has a
dynamic dimension 0 with the same size in the trace's example. Then ``max_batch_size`` (default
4, Triton's own default for ONNX models) is written, dim 0 is left out of ``dims`` and
``dynamic_batching {}`` is on. ``max_batch_size=0`` keeps full shapes and no batching.
Other dynamic dimensions (a sequence length) are ``-1``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..ir import iter_values
from .onnx_export import export_onnx, program_of_traced, traced_graph

from ._deps import require
from .errors import ExportError

DEFAULT_MAX_BATCH_SIZE = 4   # what Triton's auto-complete picks for an ONNX model that can batch
MODEL_FILE = "model.onnx"
VERSION = "1"

# ONNX TensorProto data type number -> Triton's DataType name
TRITON_TYPES = {1: "TYPE_FP32", 2: "TYPE_UINT8", 3: "TYPE_INT8", 4: "TYPE_UINT16", 5: "TYPE_INT16",
                6: "TYPE_INT32", 7: "TYPE_INT64", 8: "TYPE_STRING", 9: "TYPE_BOOL", 10: "TYPE_FP16",
                11: "TYPE_FP64", 12: "TYPE_UINT32", 13: "TYPE_UINT64", 16: "TYPE_BF16"}


@dataclass
class TensorConfig:
    name: str
    data_type: str
    dims: list   # ints; -1 for a dynamic dimension


@dataclass
class ModelConfig:
    name: str
    max_batch_size: int
    inputs: list
    outputs: list
    dynamic_batching: bool


def model_name(text: str) -> str:
    """``text`` as a Triton model (directory) name: letters, digits, ``_``, ``-`` and ``.``."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("._") or "model"
    return name


def repository_name(traced, name: str | None = None) -> str:
    """``name``, or the traced module's or function's name, as a Triton model name."""
    return model_name(name or program_of_traced(traced).name or "model")


def tensor_name(text: str) -> str:
    """``text`` as a tensor name Triton and ONNX both take (an identifier)."""
    name = re.sub(r"\W", "_", str(text), flags=re.ASCII)
    return name if name and not name[0].isdigit() else "_" + name


def with_triton_names(proto):
    """``proto``, or a copy whose input and output names are renamed to ones Triton takes (ASCII
    letters, digits, ``_``; a traced argument may be named ``größe``): config and model must agree."""
    values = list(proto.graph.input) + list(proto.graph.output)
    if all(tensor_name(v.name) == v.name for v in values):
        return proto
    ir = require("onnx_ir")
    model = ir.serde.deserialize_model(proto)
    taken = {v.name for v in list(model.graph.inputs) + list(model.graph.outputs)}
    for v in list(model.graph.inputs) + list(model.graph.outputs):
        name = tensor_name(v.name)
        if name == v.name:
            continue
        base, k = name, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        v.name = name   # onnx-ir renames every use of the value
    return ir.serde.serialize_model(model)


def _signature(values, where: str, ranks: list) -> list:
    """[(name, triton type, [dim, or None where dynamic])] of ONNX graph inputs or outputs; a value
    whose shape ONNX does not know takes its rank from the trace (``ranks``), every dim dynamic."""
    out = []
    for v, rank in zip(values, ranks):
        t = v.type.tensor_type
        if v.type.WhichOneof("value") != "tensor_type":
            raise ExportError(f"{where} '{v.name}' is not a tensor; Triton's config needs tensors")
        if t.elem_type not in TRITON_TYPES:
            raise ExportError(f"{where} '{v.name}' has ONNX data type {t.elem_type}, which Triton has no type for")
        if tensor_name(v.name) != v.name:
            raise ExportError(f"{where} name {v.name!r} is not a name Triton takes (letters, digits, '_')")
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim] if t.HasField("shape") \
            else [None] * rank
        out.append((v.name, TRITON_TYPES[t.elem_type], dims))
    return out


def batch_axis_shared(graph, proto) -> bool:
    """Dim 0 is dynamic in every ONNX input and output, and of one size in the trace's example."""
    sizes = set()
    for v in list(graph.inputs) + _output_values(graph):
        shape = getattr(v.type, "shape", None)
        if not shape:
            return False
        sizes.add(int(shape[0]))
    batch_names, other_names = set(), set()
    for v in proto.graph.input:
        dims = v.type.tensor_type.shape.dim
        batch_names.update(d.dim_param for d in dims[:1] if d.dim_param)
        other_names.update(d.dim_param for d in dims[1:] if d.dim_param)
    for v in list(proto.graph.input) + list(proto.graph.output):
        dims = v.type.tensor_type.shape.dim
        if not dims or dims[0].HasField("dim_value") or dims[0].dim_param in other_names - batch_names:
            return False   # static, or ONNX knows it is another input dimension (``x.t()``)
    return len(sizes) == 1


def _output_values(graph):
    return [v for leaf in graph.outputs for v in iter_values(leaf)]


def model_config(proto, graph, name: str, max_batch_size: int | None = None) -> ModelConfig:
    """The Triton config of the ONNX model ``proto`` exported from the traced ``graph``."""
    batchable = batch_axis_shared(graph, proto)
    if max_batch_size is None:
        max_batch_size = DEFAULT_MAX_BATCH_SIZE if batchable else 0
    if not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool) or max_batch_size < 0:
        raise ValueError(f"max_batch_size must be an int >= 0; got {max_batch_size!r}")
    if max_batch_size > 0 and not batchable:
        raise ExportError(f"max_batch_size={max_batch_size} needs a batch axis: dimension 0 dynamic in every input "
                          "and output and of one size in the trace's example; this program has none (use "
                          "max_batch_size=0: Triton then passes full shapes, no batching)")
    drop = 1 if max_batch_size > 0 else 0

    def tensors(values, where, traced_values):
        ranks = [len(getattr(v.type, "shape", ())) for v in traced_values]
        return [TensorConfig(n, t, [-1 if d is None else d for d in dims[drop:]])
                for n, t, dims in _signature(values, where, ranks)]
    return ModelConfig(model_name(name), max_batch_size, tensors(proto.graph.input, "input", graph.inputs),
                       tensors(proto.graph.output, "output", _output_values(graph)),
                       dynamic_batching=max_batch_size > 0)


def config_text(config: ModelConfig) -> str:
    """``config`` in protobuf text format (Triton's config.pbtxt)."""
    def block(kind, tensors):
        items = ",\n".join(f"  {{\n    name: {_quote(t.name)}\n    data_type: {t.data_type}\n"
                           f"    dims: [ {', '.join(str(d) for d in t.dims)} ]\n  }}" for t in tensors)
        return f"{kind} [\n{items}\n]\n"
    text = (f"name: {_quote(config.name)}\nbackend: \"onnxruntime\"\nmax_batch_size: {config.max_batch_size}\n"
            + block("input", config.inputs) + block("output", config.outputs))
    if config.dynamic_batching:
        text += "dynamic_batching { }\n"
    return text


def _quote(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_repository(traced, directory, name: str | None = None, *, max_batch_size: int | None = None,
                     opset: int | None = None, method: str = "forward"):
    """Write ``directory/<name>/config.pbtxt`` and ``directory/<name>/1/model.onnx`` for Triton's
    onnxruntime backend; returns the ``ModelConfig`` written. ``name`` defaults to the traced
    module's or function's name; ``max_batch_size`` to 4 when the program has a batch axis, else 0.

    >>> import torch, tracejit, tempfile
    >>> from tracejit.export.triton import write_repository
    >>> traced = tracejit.trace(torch.nn.Linear(16, 4), torch.randn(2, 16))
    >>> with tempfile.TemporaryDirectory() as repo:
    ...     config = write_repository(traced, repo, name="linear")
    >>> config.max_batch_size, config.inputs[0].dims, config.outputs[0].dims
    (4, [-1], [4])
    """
    name = repository_name(traced, name)
    proto = with_triton_names(export_onnx(traced, None, opset, method=method))
    config = model_config(proto, traced_graph(traced, method), name, max_batch_size)
    write_files(proto, config, directory)
    return config


def write_files(proto, config: ModelConfig, directory) -> str:
    """Write the repository entry of ``config`` with the ONNX model ``proto``; returns its directory."""
    onnx = require("onnx")
    model_dir = os.path.join(os.fspath(directory), config.name)
    os.makedirs(os.path.join(model_dir, VERSION), exist_ok=True)
    onnx.save(proto, os.path.join(model_dir, VERSION, MODEL_FILE))
    with open(os.path.join(model_dir, "config.pbtxt"), "w", encoding="utf-8") as f:
        f.write(config_text(config))
    return model_dir
