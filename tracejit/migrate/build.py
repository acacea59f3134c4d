"""Assemble a TracedModule from converted graphs and the archive's parameters and buffers."""
from __future__ import annotations

from torch import nn

from ..runtime.traced import TracedModule, compile_method
from ..serialize.budget_plan import BudgetPlan


def build_traced_module(script_root, graphs: dict, ledger, budget_elements: int) -> TracedModule:
    """Mirror the TorchScript module tree (type names, training flags, parameters, buffers,
    children; a module shared by two parents stays shared) and install the converted methods.

    ``graphs``: ``{id(script_module): {method: Graph}}``. ``budget_elements``: the archive's
    allocation budget (serialize/limits.max_elements of its size): the methods get the call-time
    budget checks of a program loaded from a file (runtime/call_budget.py), since the archive is one.
    """
    plan = BudgetPlan(budget_elements)
    made: dict[int, TracedModule] = {}
    shared: dict[int, nn.Parameter] = {}
    order = []
    for path, sm in script_root.named_modules():
        tm = TracedModule(getattr(sm, "original_name", type(sm).__name__))
        tm.training = bool(sm.training)
        for n, p in sm.named_parameters(recurse=False):
            if id(p) not in shared:
                shared[id(p)] = nn.Parameter(p.detach(), requires_grad=p.requires_grad)
            tm._parameters[n] = shared[id(p)]
        for n, b in sm.named_buffers(recurse=False):
            tm._buffers[n] = b.detach()
        made[id(sm)] = tm
        order.append((path, sm))
    for path, sm in order:
        for n, child in sm.named_children():
            made[id(sm)]._modules[n] = made[id(child)]
    root = made[id(script_root)]
    label = root.original_name
    for path, sm in order:
        for name, g in graphs.get(id(sm), {}).items():
            is_root = sm is script_root
            g.call_budget = plan
            fn = compile_method(g, name, f"{label}.{path}" if path else label, guards=is_root)
            made[id(sm)]._install(name, fn)
    root._variants[root.training] = {p: dict(made[id(sm)]._traced_methods) for p, sm in order}
    root.ledger = tuple(ledger)
    return root
