"""Tensor attributes the trace captured, checked by identity in memory (hunt26), as module-level tensors are
(global_tensors.py).

A tensor held as a plain attribute (not a parameter or buffer) of a traced module (``self.table =
torch.linspace(...)``) or of an object a module holds (a diffusers-style scheduler's ``alphas_cumprod``, read as
``self.scheduler.alphas[t]``) is captured as a constant: the program keeps that tensor object. An update in place
is the same object (the program reads it); a rebinding after the trace (``scheduler.alphas = new_table``,
``model.grid = grid.to(device)``) was missed silently: eager reads the attribute again at each call. Now each such
attribute, bound after forward to a tensor the trace captured, is held with that tensor in the graph's
``memory_checks`` (support/global_guards.IdentityChecks): a live or optimized program traces again when the
attribute is bound to another object, one without its original raises GuardError naming the line that read it.

Attributes forward itself rebinds (``self.grid = make_grid(...)`` in forward) hold a tensor the trace made, not a
captured one: not checked (they stay python_state's captures). A file keeps no such check (a file is a snapshot);
``allow_frozen_python_state=True`` keeps the captured tensors whatever the attributes are bound to later.
"""
from __future__ import annotations

import linecache

import torch
from torch import nn

from ..ir import GUARD, Node
from ..support.global_guards import IdentityChecks
from . import held_state
from .global_reads import KIND


def add_checks(tracer, graph, module, allowed: bool) -> None:
    """Add to ``graph.memory_checks`` the captured tensor attributes of ``module``'s hierarchy and held objects."""
    if allowed or module is None or not tracer.captured:
        return
    objects = [(path, m) for path, m in module.named_modules(remove_duplicate=True)]
    objects += [(path, obj) for path, obj in held_state.held(module).items() if not path.startswith("<class ")]
    items = []
    for path, obj in objects:
        space = vars(obj)
        for attr, value in list(space.items()):
            hit = tracer.captured.get(id(value)) if isinstance(value, torch.Tensor) else None
            if hit is None or hit[0] is not value or isinstance(value, nn.Parameter):
                continue
            where = f"`{path}.{attr}`" if path else f"`self.{attr}`"
            loc = hit[1]
            node = Node(GUARD, "", (), attrs={
                "kind": KIND, "test": KIND, "expected": True, "seen": True, "name": attr,
                "line": linecache.getline(loc.filename, loc.lineno).strip() if loc is not None else "",
                "what": f"{where} (an attribute of a {type(obj).__name__}) was a tensor (shape {tuple(value.shape)}, "
                        f"dtype {value.dtype}) the trace captured, and eager reads the attribute again at each call"},
                source=loc, effectful=True)
            items.append((space, attr, value, node))
    if items:
        graph.memory_checks = (graph.memory_checks or IdentityChecks(())).joined(items)
