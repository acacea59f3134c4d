"""Assemble a TracedModule from converted graphs and the archive's parameters and buffers: the archive's
module tree as a Program (tracejit/program.py), compiled by the runtime (runtime/assemble.py)."""
from __future__ import annotations

import torch
from torch import nn

from ..program import ModuleEntry, Program
from ..runtime.assemble import compile_program
from ..runtime.traced import TracedModule
from ..serialize.budget_plan import BudgetPlan


def build_traced_module(script_root, graphs: dict, ledger, budget_elements: int) -> TracedModule:
    """Mirror the TorchScript module tree (type names, training flags, parameters, buffers,
    children; a module shared by two parents stays shared) and install the converted methods.

    ``graphs``: ``{id(script_module): {method: Graph}}``. ``budget_elements``: the archive's
    allocation budget (serialize/limits.max_elements of its size): the methods get the call-time
    budget checks of a program loaded from a file (support/call_budget.py), since the archive is one.
    """
    return compile_program(script_program(script_root, graphs, ledger, budget_elements))


def script_program(script_root, graphs: dict, ledger, budget_elements: int) -> Program:
    """The Program of a converted TorchScript module tree (see ``build_traced_module``)."""
    constants = [c for gs in graphs.values() for g in gs.values() for c in (g.constants or ())]
    weights = sum(t.numel() for t in (*script_root.parameters(), *script_root.buffers(), *constants)
                  if isinstance(t, torch.Tensor))   # the archive's tensors: a base of each call's allowance
    plan = BudgetPlan(budget_elements, weights)
    shared: dict[int, nn.Parameter] = {}
    order = list(script_root.named_modules())
    path_of = {id(sm): path for path, sm in order}
    entries = []
    for path, sm in order:
        params = []
        for n, p in sm.named_parameters(recurse=False):
            if id(p) not in shared:
                shared[id(p)] = nn.Parameter(p.detach(), requires_grad=p.requires_grad)
            params.append((n, shared[id(p)]))
        methods = graphs.get(id(sm), {})
        for g in methods.values():
            plan.adopt(g)   # its element steps decide whether calls count every op (serialize/budget_plan.py)
        entries.append(ModuleEntry(
            path, getattr(sm, "original_name", type(sm).__name__), bool(sm.training), tuple(params),
            tuple((n, b.detach()) for n, b in sm.named_buffers(recurse=False)), frozenset(),
            tuple((n, path_of[id(child)]) for n, child in sm.named_children()), tuple(methods.items())))
    root = entries[0]
    return Program("module", root.type_name, tuple(entries), root.method_names, (), tuple(ledger))
