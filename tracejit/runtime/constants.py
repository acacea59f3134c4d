"""``traced.to(device)`` / ``.double()`` move the tensors a trace captured as constants too.

Generated code reads its constants from its globals (``_tj_k<n>``); ``nn.Module._apply``
moves parameters and buffers, and this moves those constants with the same function. A numpy
kernel (runtime/numpy_kernel.py) holds its constants: it is replaced by its moved copy.
"""
from __future__ import annotations

import torch


def move_constants(module, fn) -> None:
    """Apply ``fn`` (a Module._apply conversion) to the tensor constants of ``module``'s compiled methods."""
    fns = list(module._traced_methods.values())
    for variant in getattr(module, "_variants", {}).values():
        fns.extend(f for methods in variant.values() for f in methods.values())
    seen: set[int] = set()
    kernels: dict[int, object] = {}   # id(kernel function) -> its moved replacement
    for compiled in fns:
        if id(compiled) in seen:
            continue
        seen.add(id(compiled))
        ns = compiled.__globals__
        graph = getattr(compiled, "graph", None)
        constants = getattr(graph, "constants", None)
        for name, value in list(ns.items()):
            kernel = getattr(value, "kernel", None) if name.startswith("_tj_k") and callable(value) else None
            if kernel is not None and hasattr(kernel, "moved"):   # a numpy kernel holds its own constants
                if id(value) not in kernels:
                    kernels[id(value)] = kernel.moved(fn).function
                ns[name] = kernels[id(value)]
                continue
            if name.startswith("_tj_k") and isinstance(value, torch.Tensor):
                moved = fn(value)
                ns[name] = moved
                if constants is not None:
                    for i, c in enumerate(constants):
                        if c is value:
                            constants[i] = moved
