"""Graph -> Python source, compiled and registered with linecache.

The generated function is what runs when a traced program is called: one
straight-line Python function per traced method, calling the same PyTorch
entry points that ran while tracing.

This module drives it: ``CodeGen`` holds the function being written (names,
expressions, lines) and ``generate`` is the entry point. The parameters and input
checks are in signature.py, one statement per node in nodes.py, local names in
names.py, compiling (and linecache) in compiler.py.
"""
from __future__ import annotations

import torch

from ..ir import GUARD, Graph, Node, Value
from .inplace import inplace_candidates
from ..pytree import KEYED, REGISTERED, Spec
from . import budget_emit, capture_emit, nodes, signature
from .compiler import compile_function  # noqa: F401  (imported from here by runtime/ and tests)
from .guards import GuardEmitter
from .names import RESERVED, PyNamer, safe_identifier  # noqa: F401  (RESERVED: tests/security)
from .release import release_plan


class CodeGen:
    """The function being generated for one graph: its names, constant globals and lines."""

    def __init__(self, graph: Graph, fn_name: str, guards: bool, observe: bool = False, budget=None, kernels=()):
        self.observe = observe
        self.kernels = kernels   # a lowered program's kernels (passes/lowered.py): what its kernel nodes call
        self.budget = budget   # a loaded program's call-time budget plan (budget_emit.py), else None
        self.budget_checked = False
        self.needs_grad_check = False
        self.graph = graph
        self.fn_name = fn_name
        self.guards = guards
        self.namer = PyNamer(_EmptyGraph(), sigil="")
        self.def_name = safe_identifier(fn_name, limit=200)   # minted: the method's name only colours it
        self.globals: dict = {"torch": torch, "Tensor": torch.Tensor}
        self.lines: list[str] = []
        self.sources: list = []  # node source per emitted line, for tracebacks
        self.indent = ""         # inside a grad-mode region (capture_emit.enter_region)
        self.skipped: set = set()  # forward ops of custom autograd Functions called as themselves
        self.guard_emitter = GuardEmitter(self)
        # {id(node): in-place method} usable under no_grad; none when observing (a write in place would
        # change a value already handed to _observe)
        self.inplace = {} if observe else inplace_candidates(graph)

    # -- names and expressions --------------------------------------------------------------------
    def name(self, v: Value) -> str:
        return self.namer[v]

    def expr(self, a) -> str:
        if isinstance(a, Value):
            return self.name(a)
        if isinstance(a, list):
            return "[" + ", ".join(self.expr(x) for x in a) + "]"
        if isinstance(a, tuple):
            return "(" + ", ".join(self.expr(x) for x in a) + ("," if len(a) == 1 else "") + ")"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{k!r}: {self.expr(v)}" for k, v in a.items()) + "}"
        if isinstance(a, slice):
            return f"slice({self.expr(a.start)}, {self.expr(a.stop)}, {self.expr(a.step)})"
        if isinstance(a, (torch.dtype, torch.layout, torch.memory_format)):
            return str(a)
        if isinstance(a, torch.device):
            return f"torch.device({str(a)!r})"
        if isinstance(a, float) and (a != a or a in (_INF, -_INF)):
            # `float` is RESERVED: no local can shadow it
            return f"float({str(a)!r})"
        if isinstance(a, complex):
            return f"complex({self.expr(a.real)}, {self.expr(a.imag)})" if not _finite(a) else repr(a)
        if a is None or isinstance(a, (bool, int, float, str, complex)):
            return repr(a)
        return self.const_global(a)

    def const_global(self, obj) -> str:
        # numbered without the budget checks' globals (budget_emit.py), so a loaded program's constants
        # keep the names they have in the traced program's code
        name = f"_tj_k{len(self.globals) - getattr(self, 'budget_globals', 0)}"
        self.globals[name] = obj
        return name

    def call_args(self, node: Node, skip: int = 0) -> str:
        parts = [self.expr(a) for a in node.args[skip:]]
        parts += [f"{k}={self.expr(v)}" for k, v in node.kwargs.items()]
        return ", ".join(parts)

    # -- emission ---------------------------------------------------------------------------------
    def emit(self, line: str, source=None) -> None:
        self.lines.append("    " + self.indent + line)
        self.sources.append(source)

    def generate(self) -> str:
        g = self.graph
        params = signature.signature(self)
        self.skipped = capture_emit.skipped_nodes(g)
        # large intermediates dropped after their last use (release.py); not when observing or when
        # custom autograd Functions re-emit their inner nodes elsewhere
        releases = {} if self.observe or self.skipped else release_plan(g)
        first_node_line = len(self.lines)
        for i, node in enumerate(g.nodes):
            if node.op == GUARD:   # a guard runs in whatever grad-mode region is open
                if not self.observe:
                    self.guard_emitter.emit(node)
            else:
                capture_emit.enter_region(self, node)
                nodes.emit_node(self, node)
            if self.observe and id(node) not in self.skipped and node.op != GUARD:
                outs = ", ".join(self.name(v) if v is not None else "None" for v in node.outputs)
                self.emit(f"_observe({i}, ({outs}{',' if len(node.outputs) == 1 else ''}))")
            if i in releases:
                self.emit(" = ".join(self.name(v) for v in releases[i]) + " = None")
        capture_emit.enter_region(self, None)
        if getattr(g, "grad_exit", None) is not None:   # forward's bare set_grad_enabled(b), as eager leaves it
            self.emit(f"torch.set_grad_enabled({bool(g.grad_exit)})")
        self.emit("return " + self.rebuild(g.out_spec, iter(g.outputs)))
        enter = budget_emit.enter_line(self)
        if enter is not None:
            self.lines.insert(first_node_line, "    " + enter)
            self.sources.insert(first_node_line, None)
        if self.needs_grad_check:
            # in-place reuse of dead intermediates is only safe when autograd records nothing
            at = next((i for i, line in enumerate(self.lines) if not line.lstrip().startswith("if ")), 0)
            self.lines.insert(at, "    _no_grad = not torch.is_grad_enabled()")
            self.sources.insert(at, None)
        header = f"def {self.def_name}({', '.join(['self'] + params)}):"
        return "\n".join([header] + self.lines) + "\n"

    def fresh(self, hint: str) -> str:
        return self.namer.define(Value(None), hint)

    def callee_graph(self, node: Node) -> Graph:
        return self.graph.callee(node)

    def rebuild(self, spec: Spec, leaves) -> str:
        if spec.kind == "leaf":
            return self.expr(next(leaves))
        items = [self.rebuild(c, leaves) for c in spec.children]
        if spec.kind == REGISTERED:
            return capture_emit.rebuild_registered(self, spec, items)
        if spec.kind == "tuple":
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if spec.kind == "list":
            return "[" + ", ".join(items) + "]"
        if spec.kind == "namedtuple":
            return f"{self.const_global(spec.type)}({', '.join(items)})"
        if spec.kind == KEYED:
            pairs = "{" + ", ".join(f"{k}: {v}" for k, v in zip(items[0::2], items[1::2])) + "}"
            return pairs if spec.type is dict else f"{self.const_global(spec.type)}({pairs})"
        body = "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(spec.keys, items)) + "}"
        if spec.type is dict:
            return body
        return f"{self.const_global(spec.type)}(**{body})" if hasattr(spec.type, "__dataclass_fields__") \
            else f"{self.const_global(spec.type)}({body})"


_INF = float("inf")


def _finite(c: complex) -> bool:
    return all(x == x and x not in (_INF, -_INF) for x in (c.real, c.imag))


class _EmptyGraph:
    inputs = ()


def generate(graph: Graph, fn_name: str = "forward", guards: bool = False, input_error=None, observe: bool = False,
             budget=None, kernels=()):
    """Return ``(source, globals)`` for ``graph`` as a method ``fn_name(self, ...)``.

    ``budget``: for a program loaded from a file, its call-time budget plan (budget_emit.py).
    ``kernels``: for a lowered program (passes/lowered.py), the callables its ``tracejit::kernel`` nodes index.

    With ``observe=True`` the code calls ``_observe(node_index, outputs)`` after every node
    (the checker uses it to find the first diverging operation).
    """
    gen = CodeGen(graph, fn_name, guards, observe, budget, kernels)
    src = gen.generate()
    gen.globals["_input_error"] = input_error
    gen.globals["_tj_guard"] = gen.guard_emitter.failure(fn_name)
    gen.globals["_tj_def_name"] = gen.def_name
    gen.globals["_tj_line_sources"] = gen.sources   # for the notes an exception inside gets (compiler.py)
    return src, gen.globals
