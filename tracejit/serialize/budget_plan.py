"""The call-time budget plan a loaded program's code generator consults (codegen/budget_emit.py).

For each node whose op has a size rule (size_rules.py) and an argument that can change from
call to call (a traced tensor or int), the plan gives the check to call before the op and the
node's arguments bound to the op's schema names. Nodes whose arguments are all constants were
checked at load (op_checks.check_sizes) and get no check.

The plan also says whether the program's calls count every op's work (``counting``): when its ops, each at most
the budget's elements times its step weight (``ops.step_work``), could together pass half of a call's total
(call_budget.STATIC_STEPS), every op gets a ``work_count`` before it and the size checks run ungated, adding their
step weight per element they make; else the total of the counted contractions alone is checked, as before.
"""
from __future__ import annotations

import math

from ..ir import Value, iter_values
from ..ops import custom, split_name
from ..errors import LoadError
from ..support.call_budget import STATIC_STEPS, WORK_FACTOR, Allowance, _measure, size_check, work_count
from . import traced_work
from ..lazy_module import LazyModule

# consulted while code is generated: a load that hits the code cache (code_cache.py) imports none of them
op_allowlist = LazyModule(".op_allowlist", __package__)
file_guards = LazyModule(".guards", __package__)
op_checks = LazyModule(".op_checks", __package__)
schema_check = LazyModule(".schema_check", __package__)
size_rules = LazyModule(".size_rules", __package__)
_aten = LazyModule("..ops.aten", __package__)


class BudgetPlan:
    def __init__(self, file_elements: int, weights: int | None = None):
        self.file_elements = file_elements   # limits.max_elements(file size)
        # the elements of the file's tensors (call_budget.Allowance); None (migrate/build.py's plans): its calls keep
        # the file's cap (the traced call's work unknown: no allowance below it, no claim refused at load)
        self.weights = weights
        self.checked = False                 # some node got a check (the root then records its inputs)
        self.with_checks: dict[int, bool] = {}   # id(graph) -> its method, or one it calls, has checks
        self.graphs: list = []                   # the program's graphs (``adopt``); none known: every op counts
        self._counting: bool | None = None
        self._work: dict[int, int] = {}          # id(graph) -> the work of its traced call (traced_work.py)
        self._sized: dict[int, tuple | None] = {}   # id(node) -> (rule, bound) check_for found, or None: none
        self._facts: dict[str, tuple] = {}       # op -> its per-op facts (``_op_facts``), read once per plan
        self._made: dict[tuple, object] = {}     # a check's arguments -> the check (``_one``)
        # id(node) -> (node, bound arguments, size rule) the validator found for an ATen node named with its overload
        # (validate.check_graph): the same binding ``_bind`` and ``rule_for`` would make again (one schema), for
        # ``check_for``; the node itself is kept and compared, so an entry serves that node alone
        self.bound_at_load: dict[int, tuple] = {}
        self._wheres: dict[int, tuple] = {}      # id(source location) -> (it, ``_where`` of it)

    def adopt(self, graph) -> None:
        """Make this the plan of ``graph``, one of the program's methods (its element steps count in ``counting``)."""
        graph.call_budget = self
        self.graphs.append(graph)

    def counting(self) -> bool:
        """Do this program's calls count every op's work? Yes when a method's element steps (its own ops' step
        weights and those of the methods it calls, at each call) pass STATIC_STEPS, or when the plan knows none
        of the program's graphs (default-deny)."""
        if self._counting is None:
            memo: dict[int, int] = {}
            self._counting = not self.graphs or any(
                traced_work.summed_over_calls(g, memo, self.node_step, STATIC_STEPS + 1) > STATIC_STEPS
                for g in self.graphs)
        return self._counting

    def allowance(self, graph) -> Allowance:
        """The work a call entering at ``graph`` may do (support/call_budget.Allowance), from its traced call's work.
        A graph whose traced call alone passes the file's total at its traced inputs claims more than any call of
        it may do: a LoadError (its first call would stop with a BudgetError)."""
        shapes = traced_work.input_shapes(graph)
        if self.weights is None:
            return Allowance(traced_work.UNKNOWN, shapes, self.file_elements, self.file_elements)
        work = traced_work.graph_work(graph, self._work, self.node_work)
        allow = Allowance(work, shapes, self.file_elements, self.weights)
        traced = sum(math.prod(s) for s in allow.shapes)
        most = allow.claim(traced)
        if work > most:
            raise LoadError(f"graph {graph.name!r}: its traced call would compute {work} multiply-adds (its ops' "
                            f"work at the traced shapes), more than a call of this file on its traced inputs may "
                            f"({most}: support/call_budget.Allowance.claim); a program loaded from a file may not "
                            "claim such work")
        return allow

    def _op_facts(self, op: str) -> tuple:
        """``(step weight, broadcasts, name, overload, has a size rule by name, a kept custom op)`` of ``op`` (a node's op string),
        computed once per op and plan: a load asks for them at every node, several times (the work count, the size
        check, the traced work), and each is a walk of torch's registry or the op tables."""
        facts = self._facts.get(op)
        if facts is None:
            _, name, overload = split_name(op)
            aten = op.startswith("aten::")
            facts = (node_step_of(op), broadcasts(op), name, overload, aten and size_rules.rule(name) is not None,
                     op.split(".")[0] in size_rules.CUSTOM_RULES)
            self._facts[op] = facts
        return facts

    def _one(self, make, *args):
        """``make(*args)`` (call_budget.size_check / work_count), made once per plan for equal arguments: the nodes of
        one source line (a library's ``linear.py:134``, every layer's) share one check function, not one closure each
        (Mask R-CNN: 13,600 closures and 47,000 cells a load made, for the collector to walk). Arguments that are not
        plain values (a size rule) count by identity."""
        key = (make, *((type(a), a) if a is None or type(a) in (str, int, bool) else ("id", id(a)) for a in args))
        fn = self._made.get(key)
        if fn is None:
            fn = self._made[key] = make(*args)
        return fn

    def node_step(self, node) -> int:
        """``node_step(node)``, its op's weight read once per plan (``_op_facts``)."""
        op = node.op
        return self._op_facts(op)[0] if isinstance(op, str) else 0

    def node_work(self, node) -> int:
        """One node's work at its traced shapes (serialize/traced_work.py): its step weight times its tensors'
        elements, plus what its size check adds at a call (its multiply-adds and its step weight per element made)."""
        op = node.op
        if not isinstance(op, str):
            return 0
        step, wide, short, overload, has_rule, _ = self._op_facts(op)
        work = traced_work.element_work(node, step, wide)
        name = op.split(".")[0]
        found = self._sized.get(id(node), self)   # what check_for bound (the graph's code is generated first)
        if found is None:
            return work
        if found is not self:
            rule, bound = found
        elif name in size_rules.CUSTOM_RULES:
            rule = size_rules.CUSTOM_RULES[name]
            bound = schema_check.bind(custom.reviewed_schema(name), node.args, node.kwargs)
        elif op.startswith("aten::"):
            if not has_rule and not _may_take_several_tensors(short, node):
                return work   # no rule whatever the binding (check_for's shortcut): most nodes of a load
            bound = _bind(short, overload, node)
            rule = None if bound is None else size_rules.rule_for(short, bound)
        else:
            return work
        if rule is None or bound is None or rule is size_rules.SEVERAL_TENSORS:
            return work   # several tensors make their broadcast (or sum): the elements counted above, twice
        try:
            n, flops = _measure(rule, op_checks.meta_arguments(bound))
        except (ValueError, TypeError, ArithmeticError, IndexError, RuntimeError, AttributeError):
            return work   # the load's own size checks refuse such a node; counted as nothing (a smaller allowance)
        # a size that follows a traced int is unknown here (the output's traced elements count above): nothing, so a
        # file cannot raise its allowance by hiding its sizes
        return min(work + (flops or 0) + step * (n or 0), traced_work.UNKNOWN)

    def work_for(self, node):
        """``(count, tensor arguments)`` for a node of a counting program: ``work_count`` with the op's step weight
        (the work of an op of constant arguments sized now), or None for a node that computes nothing."""
        op = node.op
        if not isinstance(op, str):
            return None
        step, wide, _, _, _, custom_op = self._op_facts(op)
        if not step or not (op.startswith("aten::") or custom_op):
            return None   # no weight (a view, a size read): nothing to count, whatever its arguments
        is_tensor = size_rules.is_tensor   # read once: a LazyModule's attribute costs a lookup each time
        tensors = [a for a in (*node.args, *node.kwargs.values())
                   if any(is_tensor(x) for x in (a if isinstance(a, (list, tuple)) else (a,)))]
        fixed = 0
        if not tensors and next(iter_values((node.args, node.kwargs)), None) is None:
            fixed = self._constant_work(node, step)
        if not (tensors or fixed):
            return None
        return self._one(work_count, op.split(".")[0], step, self.file_elements, self._where(node), fixed, wide), \
            tensors

    def _where(self, node) -> str:
        """``_where(node)``, once per source location (the nodes of one line share one: program_decoder.py)."""
        src = node.source
        hit = self._wheres.get(id(src))
        if hit is None or hit[0] is not src:
            hit = self._wheres[id(src)] = (src, _where(node))
        return hit[1]

    def _constant_work(self, node, step: int) -> int:
        """The work of an op whose arguments are all constants (a factory of constant sizes): its size rule's
        elements times ``step``, plus its multiply-adds; a size rule that cannot say counts the whole budget."""
        _, name, overload = split_name(node.op)
        bound = _bind(name, overload, node)
        rule = None if bound is None else size_rules.rule_for(name, bound)
        if rule is None:
            return 0
        try:
            n = rule.elements(bound)
            flops = rule.flops(bound) if rule.flops is not None else 0
        except (ValueError, TypeError, ArithmeticError):
            n, flops = None, None
        if n is None or flops is None:
            return step * self.file_elements
        return step * n + flops

    def check_for(self, node):
        """``(check, bound arguments, gate)`` for ``node`` (gate: see ``_gate``), or None when it needs
        no call-time check."""
        op = node.op
        if op == "tracejit::guard":
            return self._guard_check(node)
        if not isinstance(op, str):
            return None
        _, _, name, overload, has_rule, custom_op = self._op_facts(op)
        hit = self.bound_at_load.pop(id(node), None)   # asked once per node: not kept past the code generation
        if custom_op:
            return self._custom_check(node)
        if not op.startswith("aten::"):
            return None
        if next(iter_values((node.args, node.kwargs)), None) is None:
            return None
        if not has_rule and not _may_take_several_tensors(name, node) \
                and not size_rules.checks_node(name, node):
            self._sized[id(node)] = None
            return None   # rule_for gives None whatever the binding: no need to bind (most nodes of a load)
        if hit is not None and hit[0] is node:   # bound by the validator, to the one schema of its overload
            _, bound, rule = hit
        else:
            bound = _bind(name, overload, node)
            if bound is not None:
                bound = size_rules.with_unpack(name, bound, node)
            rule = None if bound is None else size_rules.rule_for(name, bound)
        if rule is None:
            self._sized[id(node)] = None
            return None
        if rule is size_rules.SEVERAL_TENSORS:   # only its tensors size it
            bound = {k: v for k, v in bound.items() if _holds_tensor(v)}
        self._sized[id(node)] = (rule, bound)   # node_work measures it again at the traced shapes
        self.checked = True
        if self.counting():   # every op counts: the check runs at every call, adding its elements' steps
            return self._one(size_check, f"aten::{name}", rule, self.file_elements, self._where(node),
                             self.node_step(node)), bound, None
        return self._one(size_check, f"aten::{name}", rule, self.file_elements, self._where(node)), bound, \
            _gate(rule, bound, self.file_elements, name)

    def _guard_check(self, node):
        """A call guard repeating a read that broadcasts its two tensors (serialize/guards.BROADCASTING_CALLS:
        ``torch.allclose``): sized like an op of two tensors (their broadcast or sum) when their shapes differ; one
        that prints a tensor (TEXT_READS): at most as many elements as the text it compares with has characters."""
        call = node.attrs.get("call")
        if node.attrs.get("test") == "call" and call in file_guards.TEXT_READS and node.args \
                and isinstance(node.args[0], Value) and size_rules.is_tensor(node.args[0]) \
                and isinstance(node.attrs.get("expected"), str):   # a printed tensor: at most the text's length
            return file_guards.text_read_check(call, _where(node), len(node.attrs["expected"])), \
                {"self": node.args[0]}, None
        if node.attrs.get("test") != "call" or call not in file_guards.BROADCASTING_CALLS or len(node.args) < 2 \
                or not all(isinstance(v, Value) and size_rules.is_tensor(v) for v in node.args[:2]):
            return None
        self.checked = True
        bound = {"self": node.args[0], "other": node.args[1]}
        return self._one(size_check, f"the call guard {call}", size_rules.SEVERAL_TENSORS, self.file_elements,
                         _where(node)), \
            bound, ("shape", "self", "other")

    def _custom_check(self, node):
        """A kept custom op (torchvision's nms, roi_align): its size rule, which also checks the values its
        kernel trusts (op_sizes_vision.py), before every call, ungated."""
        op = node.op.split(".")[0]
        bound = schema_check.bind(custom.reviewed_schema(op), node.args, node.kwargs)
        self.checked = True
        step = self.node_step(node) if self.counting() else 0
        return self._one(size_check, op, size_rules.CUSTOM_RULES[op], self.file_elements, _where(node), step), bound, \
            None


def weights_of(tensors: dict) -> int:
    """The elements of a file's tensors (a base of a call's work allowance: support/call_budget.Allowance)."""
    return sum(t.numel() for t in tensors.values() if hasattr(t, "numel"))


def broadcasts(op: str) -> bool:
    """Are an op's tensor arguments counted as their broadcast (``work_count``)? Yes (default-deny: the larger
    count), except for an ATen op whose size rule counts its multiply-adds (a convolution, a matmul, a linear):
    its input, weight and bias do not broadcast together, and the rule counts its work. efficientvit_l1's 1x1
    convolutions counted as input x output channels x 256 per element: 2.4e14 for its 64-px example, refused."""
    if not op.startswith("aten::"):
        return True
    found = size_rules.rule(split_name(op).name)
    return found is None or found.flops is None


def node_step(node) -> int:
    """The step weight of a node's op (``ops.step_work``; a kept custom op: the default), 0 for tracejit's own
    nodes (constants, attributes, submodule calls: their callees count their own ops)."""
    op = node.op
    return node_step_of(op) if isinstance(op, str) else 0


def node_step_of(op: str) -> int:
    """``node_step`` of a node whose op is the string ``op``."""
    if op.startswith("aten::"):
        return _aten.step_work(op)
    return _aten.DEFAULT_STEP if op.split(".")[0] in size_rules.CUSTOM_RULES else 0


def element_steps(graph, memo: dict) -> int:
    """The step weights of a graph's ops, plus those of the methods it calls at each call (``memo``: by graph id;
    a method not linked, or a graph met again while it is being summed, counts as over any bound)."""
    return traced_work.summed_over_calls(graph, memo, node_step, STATIC_STEPS + 1)


def _where(node) -> str:
    src = node.source
    return ascii(f"{src.filename}:{src.lineno}" if src is not None else "(no source line)")[1:-1][:160]


def _gate(rule, bound: dict, file_elements: int, name: str = ""):
    """When generated code may skip the full check (None: never):

    - ``("numel", argument name, n)``: below ``n`` elements of that argument the op cannot pass the
      file's own budget (its growth over it is fixed by the file's tensors, rule.static_factor):
      ``if not 0 < x.numel() <= n: check(...)`` (an empty x too: its extent counts, op_sizes_values.py);
    - ``("shape", a, b)``: an element-by-element op (the pointwise family) of exactly two tensors makes
      no more than either when their shapes are equal (a residual add): ``if a.shape != b.shape:
      check(...)``. Not for other ops of two tensors: ``diff(x, prepend=x)`` doubles x;
    - ``("empty", argument name)``: a reshape can outgrow its input only when that is empty (its extent:
      serialize/op_sizes_values.py): ``if x.numel() == 0: check(...)``;
    - ``("test", argument name, test)``: the rule's own test of the argument (``rule.call_test``: a norm's input
      shape against its constants): ``if x.shape[-1:] != (8,): check(...)``."""
    if rule.empty_only is not None and isinstance(bound.get(rule.empty_only), Value):
        return "empty", rule.empty_only
    if rule.call_test is not None:   # a test of the input's shape against the constants (op_sizes_norms.py)
        found = rule.call_test(op_checks.meta_arguments(bound), _constants(bound))
        return None if found is None or not isinstance(bound.get(found[0]), Value) else ("test", *found)
    if rule.static_factor is None:
        return None
    found = rule.static_factor(op_checks.meta_arguments(bound), _constants(bound))
    if found is None or not isinstance(bound.get(found[0]), Value):
        if rule is size_rules.SEVERAL_TENSORS and _elementwise(name) and len(bound) == 2 \
                and all(isinstance(v, Value) for v in bound.values()):
            return ("shape", *bound)
        return None
    name, per_element, work_per_element = found
    n = min(file_elements / max(per_element, 1e-9), WORK_FACTOR * file_elements / max(work_per_element, 1))
    return "numel", name, int(n)


def _constants(bound: dict) -> set:
    """The names of the bound arguments that are the file's own tensors (made by a get_attr)."""
    return {k for k, v in bound.items() if isinstance(v, Value) and v.producer is not None
            and v.producer.op == "tracejit::get_attr"}


def _elementwise(name: str) -> bool:
    family = op_allowlist.family(name)
    return family is not None and family.name == "pointwise"


def _may_take_several_tensors(name: str, node) -> bool:
    """Could ``size_rules.rule_for`` give SEVERAL_TENSORS for this node: not an in-place op, and two or more
    tensors among its arguments (a binding holds the same values: an argument, or a list's elements)?"""
    if name.endswith("_") and not name.startswith("_"):
        return False
    values = (*node.args, *node.kwargs.values())
    is_tensor = size_rules.is_tensor   # read once: a LazyModule's attribute costs a lookup each time
    return sum(is_tensor(x) for v in values for x in (v if isinstance(v, (list, tuple)) else (v,))) >= 2


def _holds_tensor(v) -> bool:
    is_tensor = size_rules.is_tensor
    return any(is_tensor(x) for x in (v if isinstance(v, (list, tuple)) else (v,)))


def _bind(name: str, overload: str, node):
    for _, schema in _aten.schemas_of(f"aten::{name}.{overload}" if overload else f"aten::{name}"):
        bound = schema_check.bind(schema, node.args, node.kwargs)
        if bound is not None:
            return bound
    return None
