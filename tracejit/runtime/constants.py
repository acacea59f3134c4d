"""``traced.to(device)`` / ``.double()`` move the tensors a trace captured as constants too.

Generated code reads its constants from its globals (``_tj_k<n>``); ``nn.Module._apply``
moves parameters and buffers, and this moves those constants with the same function. A numpy
kernel (kernels/numpy_kernel.py) holds its constants: it is replaced by its moved copy.
"""
from __future__ import annotations

import torch

from ..ir import TensorType
from .specialize import sets_of   # every specialization's code reads its own constants


def move_constants(module, fn) -> None:
    """Apply ``fn`` (a Module._apply conversion) to the tensor constants of ``module``'s compiled methods,
    their numpy kernels' constants and the saved graphs' constant lists; each tensor is moved once."""
    fns = list(module._traced_methods.values())
    for variant in getattr(module, "_traced_variants", {}).values():
        fns.extend(f for methods in variant.values() for f in methods.values())
    fns.extend(e.fn for spec_set in sets_of(module).values() for e in spec_set.entries)
    moved: dict[int, tuple] = {}     # id(original) -> (moved, original: kept alive so ids stay unique)
    kernels: dict[int, object] = {}  # id(kernel function) -> its moved replacement

    def move(t):
        if id(t) not in moved:
            moved[id(t)] = (fn(t), t)
        return moved[id(t)][0]

    seen: set[int] = set()
    for compiled in fns:
        if id(compiled) in seen:
            continue
        seen.add(id(compiled))
        ns = compiled.__globals__
        for name, value in list(ns.items()):
            if not name.startswith("_tj_k"):
                continue
            kernel = getattr(value, "kernel", None) if callable(value) else None
            if kernel is not None and hasattr(kernel, "moved"):   # a numpy kernel holds its own constants
                if id(value) not in kernels:
                    kernels[id(value)] = kernel.moved(move).function
                ns[name] = kernels[id(value)]
            elif isinstance(value, torch.Tensor):
                ns[name] = move(value)
        graph = getattr(compiled, "graph", None)
        constants = getattr(graph, "constants", None)
        changed = set()
        for i, c in enumerate(constants or ()):
            if id(c) in moved and moved[id(c)][1] is c:   # what save writes follows the program
                constants[i] = moved[id(c)][0]
                changed.add(i)
        if changed:
            _retype_constants(graph, changed)


def _retype_constants(graph, indices: set) -> None:
    """The constant nodes reading ``graph.constants[i]`` (i in ``indices``) state its new dtype and
    device; one pass over the nodes."""
    for node in graph.nodes:
        if node.op == "tracejit::constant" and node.attrs.get("index") in indices:
            tensor = graph.constants[node.attrs["index"]]
            for v in node.outputs:
                if v is not None and isinstance(v.type, TensorType):
                    v.type = v.type.replace(dtype=tensor.dtype, device=str(tensor.device))
