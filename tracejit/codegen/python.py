"""Graph -> Python source, compiled and registered with linecache.

The generated function is what runs when a traced program is called: one
straight-line Python function per traced method, calling the same PyTorch
entry points that ran while tracing.
"""
from __future__ import annotations

import itertools
import keyword
import linecache
import re

import torch

from ..ir import GUARD, Graph, Node, Value
from ..ir.printer import Namer, format_const
from ..pytree import REGISTERED, Spec
from ..trace import indexing
from . import capture_emit
from .guards import GuardEmitter

_counter = itertools.count()


class PyNamer(Namer):
    """Mints every local name of generated code: ASCII identifiers made from a hint, never a
    keyword, a name the generated code reads as a global or builtin, nor one of codegen's own
    ``_tj_`` names. Hints may come from a loaded file; they only ever colour a minted name."""

    def __init__(self, graph, sigil: str = ""):
        self.next_suffix: dict[str, int] = {}
        super().__init__(graph, sigil)

    def define(self, v: Value, hint: str | None = None) -> str:
        name = self.mint(hint)
        self.names[id(v)] = name
        return name

    def mint(self, hint: str | None) -> str:
        base = safe_identifier(hint)
        name = base
        i = self.next_suffix.get(base, 1)
        while name in self.used:          # one step per clash: linear in the number of names
            name = f"{base}_{i}"
            i += 1
        self.next_suffix[base] = i
        self.used.add(name)
        return name


_NON_IDENT = re.compile(r"[^A-Za-z0-9_]")
# names the generated code itself reads (globals and builtins); a local may never take one
# (tests/security checks that every global of generated code is in this set or is a _tj_ name)
RESERVED = frozenset({"self", "torch", "Tensor", "isinstance", "float", "int", "bool", "complex", "getattr",
                      "slice", "len", "tuple", "list", "dict", "set", "_input_error", "_no_grad", "_observe", "_"})


def safe_identifier(hint: str | None, limit: int = 60) -> str:
    """An ASCII identifier that codegen may bind: derived from ``hint`` but never a keyword,
    a reserved global/builtin, a dunder, or in codegen's ``_tj_`` namespace."""
    base = _NON_IDENT.sub("_", (hint or "v")[:limit]) or "v"
    if base[0].isdigit():
        base = "v" + base
    if base.startswith("_tj") or base.startswith("__"):
        base = "u" + base
    if keyword.iskeyword(base) or base in RESERVED:
        base += "_"
    return base


def _node_hint(node: Node) -> str:
    if node.op == "tracejit::get_attr":
        return node.attrs["path"].replace(".", "_")
    if node.op == "tracejit::call_module":
        return node.attrs["path"].replace(".", "_")
    if node.op in capture_emit.OPS:
        return capture_emit.node_hint(node)
    return node.name.strip("_") or "v"


class CodeGen:
    def __init__(self, graph: Graph, fn_name: str, guards: bool, observe: bool = False):
        self.observe = observe
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
        name = f"_tj_k{len(self.globals)}"
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
        params = self.signature()
        if not self.observe:
            self.guard_emitter.emit_missing_training_guard()
        self.skipped = capture_emit.skipped_nodes(g)
        for i, node in enumerate(g.nodes):
            if node.op == GUARD:   # a guard runs in whatever grad-mode region is open
                if not self.observe:
                    self.guard_emitter.emit(node)
                continue
            capture_emit.enter_region(self, node)
            self.emit_node(node)
            if self.observe and id(node) not in self.skipped:
                outs = ", ".join(self.name(v) if v is not None else "None" for v in node.outputs)
                self.emit(f"_observe({i}, ({outs}{',' if len(node.outputs) == 1 else ''}))")
        capture_emit.enter_region(self, None)
        self.emit("return " + self.rebuild(g.out_spec, iter(g.outputs)))
        if self.needs_grad_check:
            # in-place reuse of dead intermediates is only safe when autograd records nothing
            at = next((i for i, line in enumerate(self.lines) if not line.lstrip().startswith("if ")), 0)
            self.lines.insert(at, "    _no_grad = not torch.is_grad_enabled()")
            self.sources.insert(at, None)
        header = f"def {self.def_name}({', '.join(['self'] + params)}):"
        return "\n".join([header] + self.lines) + "\n"

    def signature(self) -> list[str]:
        """Parameters from the input spec; unpack nested inputs; guard them when asked.

        Positional arguments of the trace stay positional; keyword arguments become keyword-only
        parameters (so a positional call cannot silently swap them); values a submodule used
        from its caller's scope come last as keyword-only ``_capture_<i>``.
        """
        g = self.graph
        spec: Spec = g.in_spec
        leaves = iter(g.input_leaves)
        names = iter(g.arg_names)
        tops = iter(g.param_names)
        args_spec, kwargs_spec = spec.children
        params = [self.bind_param(c, leaves, names, next(tops)) for c in args_spec.children]
        self.call_forward = list(params)
        keyword = [self.bind_param(c, leaves, names, next(tops)) for c in kwargs_spec.children]
        captures = [self.namer.define(v, f"_capture_{i}")
                    for i, v in enumerate(v for v in g.inputs if v.hint == "__capture__")]
        self.call_forward += [f"{k}={k}" for k in keyword + captures]
        if keyword or captures:
            params += ["*"] + keyword + captures
        return params

    def bind_param(self, spec: Spec, leaves, names, top_name: str) -> str:
        if spec.kind == "leaf":
            leaf = next(leaves)
            hint = next(names)
            if isinstance(leaf, Value):
                pname = self.namer.define(leaf, hint)
                self.guard_leaf(pname, leaf, top_name)
                return pname
            pname = self.fresh(hint)
            self.guard_const(pname, leaf, top_name)
            return pname
        pname = self.fresh(top_name)
        self.unpack(pname, spec, leaves, names, top_name)
        return pname

    def fresh(self, hint: str) -> str:
        return self.namer.define(Value(None), hint)

    def unpack(self, expr: str, spec: Spec, leaves, names, where: str) -> None:
        if spec.kind == REGISTERED:
            expr = capture_emit.registered_children(self, expr, spec, where)
        elif self.guards:
            self.guard_container(expr, spec, where)
        keys = spec.keys if spec.kind == "dict" else range(len(spec.children))
        for k, child in zip(keys, spec.children):
            sub = f"{expr}[{k!r}]"
            sub_where = f"{where}[{k!r}]"
            if child.kind == "leaf":
                leaf = next(leaves)
                hint = next(names)
                if isinstance(leaf, Value):
                    name = self.namer.define(leaf, hint)
                    self.emit(f"{name} = {sub}")
                    self.guard_leaf(name, leaf, sub_where)
                else:
                    self.guard_const(sub, leaf, sub_where)
            else:
                inner = self.fresh(_container_hint(child, None))
                self.emit(f"{inner} = {sub}")
                self.unpack(inner, child, leaves, names, sub_where)

    def guard_leaf(self, name: str, v: Value, where: str) -> None:
        if not self.guards:
            return
        if v.type is not None and hasattr(v.type, "shape"):
            # no rank check here: a guard checks the rank where the trace read it (tracejit::guard)
            self.emit(f"if not isinstance({name}, Tensor): _input_error({where!r}, {name}, 'Tensor', None)")
        else:
            self.emit(f"if not isinstance({name}, int): _input_error({where!r}, {name}, 'int', None)")

    def guard_const(self, expr: str, const, where: str) -> None:
        if not self.guards:
            return
        if const is None:
            self.emit(f"if {expr} is not None: _input_error({where!r}, {expr}, None, 'const')")
        elif isinstance(const, (bool, int, float, str)):
            lit = self.expr(const)
            self.emit(f"if {expr} != {lit}: _input_error({where!r}, {expr}, {lit}, 'const')")

    def guard_container(self, expr: str, spec: Spec, where: str) -> None:
        n = len(spec.children)
        if spec.kind in ("tuple", "namedtuple"):
            cond = f"not isinstance({expr}, tuple) or len({expr}) != {n}"
        elif spec.kind == "list":
            cond = f"not isinstance({expr}, list) or len({expr}) != {n}"
        else:
            cond = f"not isinstance({expr}, dict) or not {expr}.keys() >= {set(spec.keys)!r}"  # extra keys ignored
        self.emit(f"if {cond}: _input_error({where!r}, {expr}, {_spec_text(spec)!r}, 'container')")

    def emit_node(self, node: Node) -> None:
        if id(node) in self.skipped:
            return
        outs = node.outputs
        rhs = self.node_expr(node)
        if rhs is None:
            return
        if not outs:
            self.emit(rhs, node.source)
            return
        if "unpack" in node.attrs or node.op == "tracejit::call_module":
            names = [self.namer.define(v, _node_hint(node)) if v is not None else "_" for v in outs]
            if node.op == "tracejit::call_module" and not node.attrs.get("unpack"):
                self.emit_call_module_outputs(node, rhs, names)
                return
            self.emit(f"{', '.join(names)}{',' if len(names) == 1 else ''} = {rhs}", node.source)
            return
        v = outs[0]
        if v is None:
            self.emit(rhs, node.source)
            return
        inplace = node.attrs.get("inplace")
        if inplace and not capture_emit.builds_grad(node):
            self.needs_grad_check = True
            rest = ", ".join(self.expr(a) for a in node.args[1:])
            rhs = f"{self.expr(node.args[0])}.{inplace}({rest}) if _no_grad else {rhs}"
        self.emit(f"{self.namer.define(v, _node_hint(node))} = {rhs}", node.source)

    def emit_call_module_outputs(self, node: Node, rhs: str, names: list[str]) -> None:
        spec: Spec = node.attrs["out_spec"]
        if spec.kind == "leaf":
            self.emit(f"{names[0]} = {rhs}", node.source)
            return
        tmp = self.fresh(_node_hint(node) + "_out")
        self.emit(f"{tmp} = {rhs}", node.source)
        for name, path in zip(names, _leaf_paths(spec)):
            if name != "_":
                self.emit(f"{name} = {tmp}{path}")

    def node_expr(self, node: Node) -> str | None:
        op, target = node.op, node.target
        if op == "tracejit::get_attr":
            return _attr_path(node.attrs["path"], node.attrs.get("kind", "parameter"))
        if op == "tracejit::constant":
            return self.const_global(self.graph.constants[node.attrs["index"]])
        if op == "tracejit::call_module":
            return self.call_module_expr(node)
        if op in capture_emit.OPS:
            return capture_emit.node_expr(self, node)
        kind, _, what = target.partition(":")
        a = node.args
        if kind == "method":
            return f"{self.expr(a[0])}.{what}({self.call_args(node, 1)})"
        if kind == "fn":
            return f"{what}({self.call_args(node)})"
        if kind == "attr":
            return f"{self.expr(a[0])}.{what}"
        if kind == "op":
            if what.startswith("u"):
                return f"{what[1:]}{self.expr(a[0])}"
            if what.startswith("r"):
                return f"{self.expr(a[1])} {what[1:]} {self.expr(a[0])}"
            return f"{self.expr(a[0])} {what} {self.expr(a[1])}"
        if kind == "index":
            return self.index_expr(what, node)
        raise NotImplementedError(f"codegen: no rule for {op} ({target})")

    def index_expr(self, what: str, node: Node) -> str:
        a = node.args
        x = self.expr(a[0])
        if what == "select":
            return x + indexing.index_expr(a[1], self.expr(a[2]))
        if what == "slice":
            return x + indexing.index_expr(a[1], indexing.slice_text(self.expr(a[2]), self.expr(a[3]),
                                                                     self.expr(a[4])))
        if what == "index":
            return x + indexing.advanced_text(a[1], self.expr)
        if what == "getitem":
            return f"{x}[{self.expr(a[1])}]"
        if what == "setitem":
            return f"{x}[{self.expr(a[1])}] = {self.expr(a[2])}"
        if what == "setitem_index":
            return f"{x}{indexing.advanced_text(a[1], self.expr)} = {self.expr(a[2])}"
        raise NotImplementedError(what)

    def call_module_expr(self, node: Node) -> str:
        callee = self.callee_graph(node)
        n_cap = node.attrs["n_captures"]
        plain = node.args[: len(node.args) - n_cap]
        caps = node.args[len(node.args) - n_cap:]
        leaves = iter(callee.input_leaves)
        values = iter(plain)
        spec: Spec = callee.in_spec
        args_spec, kwargs_spec = spec.children
        parts = [self.rebuild(c, _leaf_values(leaves, values)) for c in args_spec.children]
        parts += [f"{k}={self.rebuild(c, _leaf_values(leaves, values))}"
                  for k, c in zip(kwargs_spec.keys, kwargs_spec.children)]
        parts += [f"_capture_{i}={self.expr(c)}" for i, c in enumerate(caps)]
        node.attrs["out_spec"] = callee.out_spec
        return f"{_attr_path(node.attrs['path'])}.{node.attrs['method']}({', '.join(parts)})"

    def callee_graph(self, node: Node) -> Graph:
        return node.attrs["graph"]

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


def _leaf_values(leaves, values):
    """Yield, per callee input leaf, the caller's Value (for inputs) or the constant."""
    for leaf in leaves:
        yield next(values) if isinstance(leaf, Value) else leaf


def _leaf_paths(spec: Spec, prefix: str = ""):
    if spec.kind == "leaf":
        yield prefix
        return
    keys = spec.keys if spec.kind == "dict" else range(len(spec.children))
    for k, c in zip(keys, spec.children):
        yield from _leaf_paths(c, f"{prefix}[{k!r}]")


def _attr_path(path: str, kind: str = "module") -> str:
    """``self._modules['conv']._parameters['weight']``: the storage nn.Module itself reads.

    Direct dict lookups skip ``nn.Module.__getattr__`` (a Python call per step) and always
    see the module's current parameters, buffers and submodules.
    """
    *mods, last = path.split(".")
    expr = "self" + "".join(f"._modules[{m!r}]" for m in mods)
    store = {"module": "_modules", "parameter": "_parameters", "buffer": "_buffers"}[kind]
    return f"{expr}.{store}[{last!r}]"


def _container_hint(spec: Spec, names) -> str:
    return {"tuple": "tup", "namedtuple": "tup", "list": "lst", "dict": "dct"}.get(spec.kind, "arg")


def _spec_text(spec: Spec) -> str:
    return spec.describe(iter(["Tensor"] * spec.num_leaves))


def compile_function(source: str, fn_name: str, globals_: dict, label: str):
    """Compile generated source; register it with linecache so tracebacks show it."""
    filename = f"<tracejit:{label}#{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")
    ns = dict(globals_)
    exec(code, ns)
    return ns[globals_.get("_tj_def_name", fn_name)]


def generate(graph: Graph, fn_name: str = "forward", guards: bool = False, input_error=None, observe: bool = False):
    """Return ``(source, globals)`` for ``graph`` as a method ``fn_name(self, ...)``.

    With ``observe=True`` the code calls ``_observe(node_index, outputs)`` after every node
    (the checker uses it to find the first diverging operation).
    """
    gen = CodeGen(graph, fn_name, guards, observe)
    src = gen.generate()
    gen.globals["_input_error"] = input_error
    gen.globals["_tj_guard"] = gen.guard_emitter.failure(fn_name)
    gen.globals["_tj_def_name"] = gen.def_name
    return src, gen.globals
