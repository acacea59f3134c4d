"""Codegen of the call-time budget checks of programs loaded from a file (support/call_budget.py).

Every line it adds is a call of a ``_tj_budget*`` global (the inputs' count first, in every method:
each may be an entry point; a size check before an op) and every checked int operation is ``_tj_int.<op>(a, b)``, so the code of a loaded
program reads as the traced program's plus these.

Only when the CodeGen has a ``budget`` plan (serialize/budget_plan.py hands one to loaded
programs): before an op that can allocate more than its inputs, one call of its size check with
the op's arguments bound by name; ``**``, ``<<`` and ``*`` on traced ints through the checked
functions. Programs traced in this process get neither.
"""
from __future__ import annotations

from ..ir import Value
from ..support.call_budget import INT_OPS, SYMBOLS, enter_call, enter_root


def _add_global(gen, name: str, value) -> None:
    """A global of the budget checks, counted apart (codegen/python.py numbers constants without them)."""
    if name not in gen.globals:
        gen.budget_globals = getattr(gen, "budget_globals", 0) + 1
    gen.globals[name] = value


def before_node(gen, node) -> None:
    """Emit the node's work count (a program whose calls count every op's work: serialize/budget_plan.py), and
    its size check, if its op has one and an argument can change from call to call."""
    planned = gen.budget.check_for(node)
    _emit_check(gen, node, planned)
    if gen.budget.counting():   # after the size check: an op over its own budget says what it would allocate
        counted = gen.budget.work_for(node)
        if counted is not None:
            count, tensors = counted
            name = f"_tj_budget{len(gen.globals)}"
            _add_global(gen, name, count)
            gen.budget_checked = gen.budget_ungated = True
            gen.budget.checked = True
            gen.emit(f"{name}({', '.join(gen.expr(t) for t in tensors)})", node.source)


def _emit_check(gen, node, planned) -> None:
    """Emit a node's planned size check (``BudgetPlan.check_for``), behind its gate if it has one."""
    if planned is None:
        return
    check, bound, gate = planned
    gen.budget_checked = True
    body = "{" + ", ".join(f"{k!r}: {gen.expr(v)}" for k, v in bound.items()) + "}"
    name = f"_tj_budget{len(gen.globals)}"
    _add_global(gen, name, check)
    if gate is None:
        gen.budget_ungated = True
        gen.emit(f"{name}({body})", node.source)
        return
    if gate[0] == "numel":   # a product by a weight of the file: only an argument that big could pass the budget
        _, arg, most = gate
        # an empty argument is checked too: its extent (op_sizes_values.py) can pass the budget
        gen.emit(f"if not 0 < {gen.expr(bound[arg])}.numel() <= {most}: {name}({body})", node.source)
    elif gate[0] == "empty":   # a reshape of an empty tensor: its new shape's extent (serialize/op_sizes_values.py)
        gen.emit(f"if {gen.expr(bound[gate[1]])}.numel() == 0: {name}({body})", node.source)
    elif gate[0] == "test":   # the rule's test of the argument (serialize/op_sizes_norms.py), written from ints
        names = {k: gen.expr(v) for k, v in bound.items() if isinstance(v, Value)}
        gen.emit(f"if {gate[2].format(**names)}: {name}({body})", node.source)
    else:   # two tensors of one shape broadcast to that shape
        _, a, b = gate
        gen.emit(f"if {gen.expr(bound[a])}.shape != {gen.expr(bound[b])}.shape: {name}({body})", node.source)
    gen.budget_gates = getattr(gen, "budget_gates", []) + [len(gen.lines) - 1]


def int_op_expr(gen, node) -> str | None:
    """``_tj_int.pow(a, b)`` for ``a ** b`` on ints, traced or constant (likewise ``<<``, ``*``), else None."""
    target = node.target
    if gen.budget is None or target is None or target.kind != "op":
        return None
    what = target.name
    fn = SYMBOLS.get(what[1:] if what.startswith("r") else what)
    if fn is None or len(node.args) != 2 or not any(_int(a) for a in node.args) or any(
            isinstance(a, Value) and hasattr(a.type, "shape") for a in node.args):
        return None   # not int arithmetic (a constant int counts: a file may write `3 ** 10**18` as two constants)
    left, right = (node.args[1], node.args[0]) if what.startswith("r") else node.args
    _add_global(gen, "_tj_int", INT_OPS)
    return f"_tj_int.{fn}({gen.expr(left)}, {gen.expr(right)})"


def _int(a) -> bool:
    return isinstance(a, int) and not isinstance(a, bool) or isinstance(a, Value) and getattr(a.type, "kind", None) == "int"


def enter_line(gen) -> str | None:
    """The first statement of a method whose call needs a budget: its inputs' elements, the budget of the
    call when the method is an entry point (a root method, or a submodule method the user calls directly;
    support/call_budget.enter_call keeps the outer budget for a call from inside the program).

    A method needs one when it has checks or calls a method that may have (a callee not compiled yet
    counts as one that has: default-deny), a root method also when any method of the program has checks.
    A leaf method whose checks are all gated (``if not 0 < x.numel() <= N:``, a Linear's) counts its inputs inside
    each gate instead, so a call within the program pays for nothing but the gate."""
    if gen.budget is None:
        return None
    _add_global(gen, "_tj_budget_inputs", enter_call)   # also marks this code as the program's own (nested calls)
    plan = gen.budget
    callees = [gen.graph.callees.get((n.attrs["path"], n.attrs["method"])) for n in gen.graph.nodes
               if n.op == "tracejit::call_module"]
    callees_need = any(plan.with_checks.get(id(c), True) for c in callees)
    plan.with_checks[id(gen.graph)] = gen.budget_checked or callees_need
    if not (gen.budget_checked or callees_need or (gen.guards and plan.checked)):
        return None
    tensors = [gen.name(v) for v in gen.graph.inputs if hasattr(v.type, "shape") and not v.capture]
    # the work this method's calls may do in all (support/call_budget.Allowance), from its traced call's work
    _add_global(gen, "_tj_budget_allow", plan.allowance(gen.graph))
    args = ", ".join(["_tj_budget_allow", *tensors])
    call = f"_tj_budget_inputs({args})"
    if gen.guards:   # a root method is always an entry point: no test of its caller
        _add_global(gen, "_tj_budget_root", enter_root)
        return f"_tj_budget_root({args})"
    if callees_need or getattr(gen, "budget_ungated", False):
        return call
    for i in getattr(gen, "budget_gates", ()):
        head, _, check = gen.lines[i].partition(": ")
        gen.lines[i] = f"{head}: {call}; {check}"
    return None
