"""Emitting ``tracejit::guard`` nodes: one ``if`` per guard, the same shape for every kind.

    if <predicate> != expected: _tj_guard(k, <value now>)

``_tj_guard`` (support/guards.py) raises GuardError naming guard ``k``.
"""
from __future__ import annotations

from ..ir import BOOL_TESTS, Node, guard_expr
from . import budget_emit
from ..ir.guard_nodes import flag_predicate
from ..support.global_guards import ContainerCheck, global_value, inline_check, namespace
from ..support.guards import GuardFailure
from ..support.object_checks import ObjectCheck, ObjectChecks
from ..support.module_hooks import HookSpace, hooks_now, traced_value
from ..support.guards import needs_plain, plain_value
from ..support.read_cap import leaves, read_cap, reads_elements


class GuardEmitter:
    def __init__(self, gen):
        self.gen = gen
        self.table: list = []   # (node, predicate text) per emitted guard, indexed by k
        self.objects: dict = {}   # id(an object's __dict__) -> its ObjectCheck (support/object_checks.py)
        self.object_group = None   # every ObjectCheck of this function, checked together at the first one's line

    def emit(self, node: Node) -> None:
        gen = self.gen
        if id(node) in gen.skipped:   # made inside a custom autograd Function's forward, which runs as itself in
            return                    # memory (its Python branches live): its operands are not computed here
        if gen.budget is not None:   # a loaded program: a call guard that broadcasts is sized first (round 25)
            budget_emit.before_node(gen, node)
        test, expected = node.attrs["test"], node.attrs["expected"]
        operands = [gen.expr(a) for a in node.args]
        pred = guard_expr(test, operands, node.attrs.get("call"), [f"{k}={gen.expr(v)}" for k, v in node.kwargs.items()])
        if test == "training" and node.attrs.get("path"):   # a submodule's flag (trace/module_flags.py)
            pred = flag_predicate(node.attrs["path"])
        if test == "global":   # a module-level global (trace/global_reads.py)
            self._emit_global(node)
            return
        if needs_plain(test, expected):
            # NaN, signed zeros, tuples, strings and objects compare as support/guards.plain_value gives them
            pred = f"_tj_plain({pred})"
            gen.globals["_tj_plain"] = plain_value
        if test in BOOL_TESTS and isinstance(expected, bool):
            cond = f"not ({pred})" if expected else pred
            now = operands[0] if operands and test not in ("truth", "equal") else pred
        else:
            cond = f"{pred} != {gen.expr(expected)}"
            now = pred
        k = len(self.table)
        self.table.append((node, pred))
        if gen.budget is not None and operands and reads_elements(test, node.attrs.get("call")):
            # a loaded program reads at most the elements the guard compares with (~60 B of Python objects each)
            most = leaves(expected)
            budget_emit._add_global(gen, "_tj_read_cap", read_cap)
            gen.emit(f"if {operands[0]}.numel() > {most}: _tj_guard({k}, _tj_read_cap({operands[0]}, {most}))",
                     node.source)
        gen.emit(f"if {cond}: _tj_guard({k}, {now})", node.source)

    def _emit_global(self, node: Node) -> None:
        """``if <the global's value differs>: _tj_guard(k, _tj_global(<module's __dict__>, 'NAME'))``: a scalar is
        compared inline, anything else through ``global_value``; a module no longer imported reads as unbound."""
        gen = self.gen
        mapping = namespace(node.attrs)
        gen.globals["_tj_global"] = global_value
        name, expected = node.attrs["name"], node.attrs["expected"]
        if isinstance(mapping, HookSpace):   # torch's global module hooks: one compare of a tuple, () when none
            k = len(self.table)
            self.table.append((node, "torch's global module hooks"))
            gen.globals["_tj_hooks"] = hooks_now
            gen.emit(f"if _tj_hooks() != {gen.const_global(traced_value(expected))}: _tj_guard({k}, "
                     f"_tj_global({gen.const_global(mapping)}, {name!r}))", node.source)
            return
        if node.attrs.get("space") is not None:   # a config object's attribute: one check per object
            self._emit_object(node, mapping, name, expected)
            return
        table = gen.const_global(mapping)
        now = f"_tj_global({table}, {name!r})"
        cond = inline_check(expected, f"{table}.get({name!r})", gen.expr)
        if cond is None:   # a container (or NaN, a signed zero): the object the trace read, else its value
            check = ContainerCheck(mapping, name, expected)
            cond = f"{gen.const_global(check)}.changed()"
        k = len(self.table)
        self.table.append((node, now))
        gen.emit(f"if {cond}: _tj_guard({k}, {now})", node.source)

    def _emit_object(self, node: Node, mapping, name: str, expected) -> None:
        """The first guard on an object of the function emits ``if G.changed(): G.fail(_tj_guard)`` (G: the
        function's ObjectChecks); a guard on another object joins its ObjectCheck to G, one on the same object
        joins that check. (The objects are Python state no traced op writes: checked at the first one's line, each
        holds as it would at its own.)"""
        check = self.objects.get(id(mapping))
        if check is None:
            check = self.objects[id(mapping)] = ObjectCheck(mapping)
            if self.object_group is None:
                self.object_group = ObjectChecks()
                group = self.gen.const_global(self.object_group)
                self.gen.emit(f"if {group}.changed(): {group}.fail(_tj_guard)", node.source)
            self.object_group.join(check)
        k = len(self.table)
        self.table.append((node, f"{node.attrs.get('owner')}.{name}"))
        check.add(k, name, expected)

    def failure(self, fn_name: str):
        return GuardFailure(self.table, fn_name)
