"""The call-time budget plan a loaded program's code generator consults (codegen/budget_emit.py).

For each node whose op has a size rule (size_rules.py) and an argument that can change from
call to call (a traced tensor or int), the plan gives the check to call before the op and the
node's arguments bound to the op's schema names. Nodes whose arguments are all constants were
checked at load (op_checks.check_sizes) and get no check.
"""
from __future__ import annotations

from ..ir import Value, iter_values
from ..runtime.call_budget import size_check
from ..trace import ops as opnames
from . import op_allowlist, schema_check


class BudgetPlan:
    def __init__(self, file_elements: int):
        self.file_elements = file_elements   # limits.max_elements(file size)
        self.checked = False                 # some node got a check (the root then records its inputs)

    def check_for(self, node):
        """``(check, bound arguments)`` for ``node``, or None when it needs no call-time check."""
        op = node.op
        if not isinstance(op, str) or not op.startswith("aten::"):
            return None
        name, _, overload = op[6:].partition(".")
        rule = op_allowlist.size_rule(name)
        if rule is None or not any(True for _ in iter_values((node.args, node.kwargs))):
            return None
        bound = _bind(name, overload, node)
        if bound is None:
            return None
        src = node.source
        where = ascii(f"{src.filename}:{src.lineno}" if src is not None else "(no source line)")[1:-1][:160]
        self.checked = True
        return size_check(f"aten::{name}", rule, self.file_elements, where), bound


def _bind(name: str, overload: str, node):
    packet = opnames.aten_packet(name)
    if packet is None:
        return None
    for ov in ([overload] if overload else packet.overloads()):
        schema = getattr(packet, ov)._schema
        bound = schema_check.bind(schema, node.args, node.kwargs)
        if bound is not None:
            return bound
    return None
