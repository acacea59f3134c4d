"""Size guards on intermediate tensors, checked before an ONNX model runs (issue #20; backends/onnx_call.py).

A guard on the size of an intermediate tensor (``h = x.view(-1, 4); if h.shape[0] > 2``, ``h = lin(x).flatten();
if h.size(0) > 16``) cannot be held by an ONNX model, which keeps the traced branch for every size. The
onnxruntime / OpenVINO programs check such a guard before each run by evaluating the slice of the traced program
it reads on ``meta`` tensors of the call's input shapes (torch's shape functions: no data is read and nothing is
computed), so its expression over the input sizes is evaluated exactly, and raise the plain program's GuardError
naming the line when it fails.

A slice holding an op whose result's shape depends on the data (ATen's ``dynamic_output_shape`` tag: nonzero,
masked_select, boolean indexing, unique, ...; ``ops.has_data_dependent_shape``) cannot be evaluated from sizes:
the backend refuses the program with ``ExportError`` naming the guard's line (default-deny), where the torch
backend answers.
"""
from __future__ import annotations

import torch

from .. import pytree
from ..export.errors import ExportError
from ..ir import Node, Value
from ..ops import has_data_dependent_shape
from ..ops.names import CONSTANT, GET_ATTR

META = torch.device("meta")


def tensor_slice(guard, producers: dict) -> dict:
    """{id(node): node} of every node ``guard`` reads, back to the graph's inputs."""
    found, todo = {}, list(guard.input_values())
    while todo:
        node = producers.get(id(todo.pop()))
        if node is None or id(node) in found:
            continue
        found[id(node)] = node
        todo.extend(node.input_values())
    return found


def refuse_data_dependent(guard, nodes, backend: str) -> None:
    """ExportError when a node of the slice has a data-dependent shape: the guard is no function of sizes."""
    for node in nodes:
        if node.op.startswith("aten::") and has_data_dependent_shape(node.op):
            raise ExportError(
                f"the trace relied on the size of a tensor whose shape depends on the data ({node.op} at "
                f"{node.source}; the guard: {guard.attrs.get('what') or guard.attrs.get('test')}); the {backend} "
                "model cannot check it and would keep the traced branch for other values. Use the torch backend "
                "(optimize_for_inference(..., backend='torch')) or the traced program", node.op,
                guard.source or guard.attrs.get("line"))


def on_meta(graph, traced) -> None:
    """Make ``graph``'s tensors meta: its constants, and each parameter / buffer it reads (a constant now)."""
    graph.constants = [c.to(META) if isinstance(c, torch.Tensor) else c for c in graph.constants]
    for node in graph.nodes:
        if node.op != GET_ATTR:
            continue
        t = _tensor_at(traced, node.attrs["path"])
        node.op, node.target = CONSTANT, None
        node.attrs = {"index": len(graph.constants)}
        graph.constants.append(t.detach().to(META))


def _tensor_at(module, path: str) -> torch.Tensor:
    *mods, last = path.split(".")
    for part in mods:
        module = module._modules[part]
    found = module._parameters.get(last)
    return found if found is not None else module._buffers[last]


def meta_arguments(args, kwargs):
    """The call's arguments with each tensor a meta tensor of its shape, strides and dtype (no copy of data)."""
    leaves, spec = pytree.flatten((tuple(args), dict(kwargs)))
    out = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=META) if isinstance(x, torch.Tensor)
           else x for x in leaves]
    return pytree.unflatten(spec, out)


def reads_tensors(nodes) -> bool:
    """Does a node of the kept slice compute a tensor (then the check runs on meta tensors)?"""
    return any(isinstance(v, Value) and hasattr(v.type, "shape") for n in nodes for v in n.outputs) or any(
        isinstance(n, Node) and n.op in (CONSTANT, GET_ATTR) for n in nodes)
