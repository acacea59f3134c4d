"""``load(..., map_location=device)`` moves a program's devices, not only its tensors.

A program traced on one device and loaded onto another with ``map_location`` runs its tensors there; what
it recorded about devices moves with them:

* a device guard (``str(t.device) == 'cuda:0'``: the traced code read a tensor's device in Python, as
  transformers' T5 and DeBERTa do to build masks) now expects the new device: the inputs of a program
  mapped to the CPU are CPU tensors, and the code path it recorded is the one eager takes there too;
* each recorded tensor type names the new device, so the backends that look at a program's device
  (``optimize_for_inference``'s CPU kernels, the CPU-only ONNX engines) see where it now runs.

A device the code names literally (``x.to("cuda")``) is a constant of the program and stays what the code
says (docs/CAPTURE.md).
"""
from __future__ import annotations

import torch

from ..ir import GUARD, TensorType


def target_device(map_location) -> str:
    """The device text tensors read back on after loading to ``map_location`` ('cuda' -> 'cuda:0')."""
    device = torch.device(map_location)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return f"cuda:{torch.cuda.current_device()}"
    return str(device)


def relocate(program, map_location) -> None:
    """Point ``program``'s device guards and tensor types at ``map_location`` (module docstring)."""
    target = target_device(map_location)
    todo, seen = [g for _, _, g in program.graphs()], set()
    while todo:
        graph = todo.pop()
        if id(graph) in seen:
            continue
        seen.add(id(graph))
        todo += list(getattr(graph, "callees", {}).values())
        for value in graph.inputs:
            _retype(value, target)
        for node in graph.nodes:
            if node.op == GUARD and node.attrs.get("kind") == "device" and isinstance(node.attrs.get("expected"), str):
                node.attrs["expected"] = node.attrs["seen"] = target
            for value in node.outputs:
                _retype(value, target)


def _retype(value, target: str) -> None:
    t = getattr(value, "type", None)
    if isinstance(t, TensorType) and t.device != target:
        value.type = TensorType(t.dtype, t.shape, target, t.requires_grad)
