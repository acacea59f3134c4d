"""Codegen of the call-time budget checks of programs loaded from a file (support/call_budget.py).

Every line it adds is a call of a ``_tj_budget*`` global (the inputs' count first, a size check
before an op) and every checked int operation is ``_tj_int.<op>(a, b)``, so the code of a loaded
program reads as the traced program's plus these.

Only when the CodeGen has a ``budget`` plan (serialize/budget_plan.py hands one to loaded
programs): before an op that can allocate more than its inputs, one call of its size check with
the op's arguments bound by name; ``**``, ``<<`` and ``*`` on traced ints through the checked
functions. Programs traced in this process get neither.
"""
from __future__ import annotations

from ..ir import Value
from ..support.call_budget import INT_OPS, SYMBOLS, enter_call


def _add_global(gen, name: str, value) -> None:
    """A global of the budget checks, counted apart (codegen/python.py numbers constants without them)."""
    if name not in gen.globals:
        gen.budget_globals = getattr(gen, "budget_globals", 0) + 1
    gen.globals[name] = value


def before_node(gen, node) -> None:
    """Emit the node's size check, if its op has one and an argument can change from call to call."""
    planned = gen.budget.check_for(node)
    if planned is None:
        return
    check, bound, gate = planned
    gen.budget_checked = True
    body = "{" + ", ".join(f"{k!r}: {gen.expr(v)}" for k, v in bound.items()) + "}"
    name = f"_tj_budget{len(gen.globals)}"
    _add_global(gen, name, check)
    if gate is None:
        gen.emit(f"{name}({body})", node.source)
    elif gate[0] == "numel":   # a product by a weight of the file: only an argument that big could pass the budget
        _, arg, most = gate
        gen.emit(f"if {gen.expr(bound[arg])}.numel() > {most}: {name}({body})", node.source)
    else:   # two tensors of one shape broadcast to that shape
        _, a, b = gate
        gen.emit(f"if {gen.expr(bound[a])}.shape != {gen.expr(bound[b])}.shape: {name}({body})", node.source)


def int_op_expr(gen, node) -> str | None:
    """``_tj_int.pow(a, b)`` for ``a ** b`` on a traced int (likewise ``<<``, ``*``), else None."""
    target = node.target
    if gen.budget is None or target is None or target.kind != "op":
        return None
    what = target.name
    fn = SYMBOLS.get(what[1:] if what.startswith("r") else what)
    if fn is None or len(node.args) != 2 or not any(
            isinstance(a, Value) and getattr(a.type, "kind", None) == "int" for a in node.args):
        return None
    left, right = (node.args[1], node.args[0]) if what.startswith("r") else node.args
    _add_global(gen, "_tj_int", INT_OPS)
    return f"_tj_int.{fn}({gen.expr(left)}, {gen.expr(right)})"


def enter_line(gen) -> str | None:
    """The root method's first statement when the program has size checks: its inputs' elements."""
    if gen.budget is None or not gen.guards or not (gen.budget_checked or gen.budget.checked):
        return None
    tensors = [gen.name(v) for v in gen.graph.inputs if hasattr(v.type, "shape") and v.hint != "__capture__"]
    _add_global(gen, "_tj_budget_inputs", enter_call)
    return f"_tj_budget_inputs({', '.join(tensors)})"
