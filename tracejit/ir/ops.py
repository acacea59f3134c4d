"""tracejit's own ops, defined once.

Each entry says what the op's attributes are (type, required, saved in files
or in memory only), whether it is pure (dead-code elimination may drop it) and
which attributes ``.graph`` prints. The grammar docstring of graph.py, the
verifier, the printer, codegen, the saver (which attributes it writes) and the
loader (which attributes a file may give, of which type) all read this table:
adding an op or an attribute is one edit here.

Guards (``tracejit::guard``) state a predicate the trace relied on, in terms
of recorded values: ``test`` names the predicate (``GUARD_TESTS``), ``args``
hold its operands (Values or constants), ``expected`` is its outcome at trace
time. Codegen emits ``if <predicate> != expected: fail``.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping
from . import state_tests
from ..records import FrozenRecord


class Attr(FrozenRecord):
    """One attribute of an op: its type in a file, whether every node has it, whether files hold it.
    ``type``: what a saved value must be (``object``: its shape is checked by serialize/guards.py);
    ``saved`` False: in memory only (a link to a Graph, a Python class), never in a file."""
    __slots__ = _fields = ("type", "required", "saved")

    def __init__(self, type: type, required: bool = True, saved: bool = True):
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "required", required)
        object.__setattr__(self, "saved", saved)


def _optional(t: type) -> Attr:
    return Attr(t, required=False)




class OpDef(FrozenRecord):
    """One of tracejit's own ops: ``attrs`` (attribute name -> Attr), ``pure``, ``shown`` (the attributes
    the graph printer prints), ``doc``."""
    __slots__ = _fields = ("name", "attrs", "pure", "shown", "doc")

    def __init__(self, name: str, attrs: dict, pure: bool, shown: tuple, doc: str):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "attrs", attrs)
        object.__setattr__(self, "pure", pure)
        object.__setattr__(self, "shown", shown)
        object.__setattr__(self, "doc", doc)


_DEFS = (
    OpDef("tracejit::get_attr", {"path": Attr(str), "kind": Attr(str)}, True, ("path",),
          "a parameter or buffer of the module (attrs.path, attrs.kind)"),
    OpDef("tracejit::constant", {"index": Attr(int)}, True, ("index",),
          "a tensor captured as a constant (attrs.index into graph.constants)"),
    OpDef("tracejit::call_module", {"path": Attr(str), "method": Attr(str), "n_captures": Attr(int)}, False,
          ("path", "method"), "calls a submodule's traced method, named by attrs.path and attrs.method "
          "(the caller's Graph.callees links the name to the callee's Graph)"),
    OpDef("tracejit::getitem", {}, True, (), "Python indexing of a container: args (obj, idx)"),
    OpDef("tracejit::setitem", {}, False, (), "Python index assignment: args (obj, idx, value)"),
    OpDef("tracejit::dtype_of", {}, True, (), "x.dtype of a tensor value (dtype-relative capture, docs/CAPTURE.md)"),
    OpDef("tracejit::device_of", {}, True, (), "x.device of a tensor value (device-relative capture)"),
    OpDef("tracejit::finfo", {"attr": Attr(str)}, True, ("attr",), "torch.finfo(dtype).<attr> of a recorded dtype"),
    OpDef("tracejit::autograd_function", {"name": Attr(str), "function_id": Attr(int), "unpack": _optional(int)},
          True, ("name",), "a custom autograd Function: args (apply_args, forward_outputs); in memory "
          "Cls.apply (Cls: the graph's functions[attrs.function_id])"),
    OpDef("tracejit::kernel", {"index": Attr(int, saved=False), "ops": Attr(str, saved=False),
                               "unpack": Attr(int, required=False, saved=False)}, True, ("ops",),
          "in memory only: a callable a lowering pass built (the lowered program's kernels[attrs.index]; attrs.ops says "
          "what it runs; attrs.unpack: the number of results it returns as a tuple, where it returns several)"),
    OpDef("tracejit::sym_math", {"fn": Attr(str)}, True, ("fn",),
          "math.ceil / floor / trunc, round, max, min of traced sizes (attrs.fn; trace/symfloat.py)"),
    OpDef("tracejit::manual_seed", {"seed": Attr(int)}, False, ("seed",),
          "torch.manual_seed(attrs.seed) where forward seeded torch's global generator (trace/rng_record.py)"),
    OpDef("tracejit::new_generator", {"device": Attr(str)}, True, ("device",),
          "torch.Generator(attrs.device) made by forward: a generator-typed value"),
    OpDef("tracejit::seed_generator", {"seed": Attr(int)}, False, ("seed",),
          "g.manual_seed(attrs.seed) of a generator forward made: args (g,)"),
    OpDef("tracejit::guard", {"kind": Attr(str), "test": Attr(str), "expected": Attr(object),
                              "seen": _optional(object), "what": _optional(str), "line": _optional(str),
                              "call": _optional(str), "path": _optional(str),
                              # a ``global`` guard's module and variable (trace/global_reads.py): in memory only
                              "module": Attr(str, required=False, saved=False),
                              "name": Attr(str, required=False, saved=False),
                              "owner": Attr(str, required=False, saved=False),
                              # or the __dict__ of a config object the trace held (support/object_checks.py)
                              "space": Attr(object, required=False, saved=False)},
          False, ("kind", "test", "module", "name", "expected"),
          "fails the call unless GUARD_TESTS[test](*args) == expected"),
)
OPS = {d.name: d for d in _DEFS}
GUARD = "tracejit::guard"
# attributes of the other (ATen) nodes: a list result unpacked into n values, a random op
# a random op that draws after the program seeded its own generator (``seeded``: never dropped, trace/rng_record.py)
ATEN_ATTRS = {"unpack": _optional(int), "nondeterministic": _optional(bool), "seeded": _optional(bool)}
# what any node may carry: the grad mode / autocast state it ran under and the custom autograd Function
# whose forward it belongs to (their values are checked by serialize/capture_ops.check_node_attrs)
REGION_ATTRS = {"grad": _optional(str), "autocast": _optional(list), "in_function": _optional(int)}


_saved_tables: dict = {}   # op name (None: any ATen op) -> (its OpDef, the read-only table saved_attrs gave)


def saved_attrs(op) -> Mapping:
    """Attribute name -> type, for every attribute a saved node of ``op`` may carry (read-only; made once per
    table entry: the loader asks for every node it reads)."""
    d = OPS.get(op) if isinstance(op, str) else None
    key = d.name if d is not None else None
    made = _saved_tables.get(key)
    if made is not None and made[0] is d:
        return made[1]
    own = d.attrs if d is not None else ATEN_ATTRS
    table = MappingProxyType({k: a.type for k, a in {**own, **REGION_ATTRS}.items() if a.saved})
    _saved_tables[key] = (d, table)   # OPS's names only, plus None: bounded whatever files name
    return table


# test -> (number of operands, Python expression template over the operands)
GUARD_TESTS = {
    "eq": (2, "{0} == {1}"), "ne": (2, "{0} != {1}"), "lt": (2, "{0} < {1}"), "le": (2, "{0} <= {1}"),
    "gt": (2, "{0} > {1}"), "ge": (2, "{0} >= {1}"),
    "truth": (1, "bool({0})"), "item": (1, "{0}.item()"), "int": (1, "int({0})"), "float": (1, "float({0})"),
    "tolist": (1, "{0}.tolist()"), "equal": (2, "torch.equal({0}, {1})"),
    "dim": (1, "{0}.dim()"), "len": (1, "len({0})"), "training": (0, "self.training"),
    "dtype": (1, "str({0}.dtype)"), "device": (1, "str({0}.device)"),
    "call": (-1, ""),   # any number of operands (and kwargs): the call named by attrs.call (call_text)
    "global": (0, ""),  # a module-level global: attrs.module / attrs.name (trace/global_reads.py, codegen/guards.py)
}
# attrs.call of a "call" guard: how the call is written, "kind:name" (trace/boundary.py)
CALL_FORMS = {"method": "{0}.{name}({rest})", "attr": "{0}.{name}", "fn": "{name}({all})", "builtin": "{name}({all})"}
# which guards need no device sync: kept by guards="shapes"
GUARD_KINDS = {"size": "free", "rank": "free", "length": "free", "training": "free", "value": "sync",
               "dtype": "free", "device": "free", "meta": "free", "state": "free", "global": "free"}
BOOL_TESTS = {"eq", "ne", "lt", "le", "gt", "ge", "truth", "equal", "training"}


def guard_expr(test: str, operands: list, call: str | None = None, kwargs: list | None = None) -> str:
    """The Python text of a guard's predicate, given its operands' texts (and ``name=text`` kwargs); a
    global-state test is its own text (ir/state_tests.py)."""
    if test == "call":
        return call_text(call, operands, kwargs or [])
    if test not in GUARD_TESTS and state_tests.is_state_test(test):
        state_tests.import_backend(test)   # torch.backends.<module> bound for the generated code
        return test
    return GUARD_TESTS[test][1].format(*operands)


def guard_arity(test) -> int | None:
    """How many operands guard test ``test`` takes (-1: any, for a call guard; None: no such test)."""
    if test in GUARD_TESTS:
        return GUARD_TESTS[test][0]
    return 0 if state_tests.is_state_test(test) else None


def call_text(call: str, operands: list, kwargs: list) -> str:
    """``"method:stride"``, ``["x", "0"]`` -> ``x.stride(0)``: the call a "call" guard makes again."""
    kind, _, name = str(call).partition(":")
    rest = ", ".join(list(operands[1:]) + list(kwargs))
    every = ", ".join(list(operands) + list(kwargs))
    return CALL_FORMS[kind].format(operands[0] if operands else "", name=name, rest=rest, all=every)


def live_attr(op: str, name: str) -> bool:
    """May attribute ``name`` of ``op`` hold a live object (declared ``Attr(object, saved=False)``: a ``global``
    guard's ``space``, the ``__dict__`` of a config object the trace held)? Never in a file."""
    d = OPS.get(op)
    a = d.attrs.get(name) if d is not None else None
    return a is not None and not a.saved and a.type is object


def check_tracejit_node(node) -> str | None:
    """What is wrong with a tracejit:: node's attributes (None when it fits the table)."""
    d = OPS.get(node.op)
    if d is None:
        return f"unknown tracejit op {node.op!r} (known: {', '.join(OPS)})"
    for name, attr in d.attrs.items():
        if attr.required and name not in node.attrs:
            return f"{node.op} needs attribute {name!r}"
    if node.op == GUARD:
        test = node.attrs.get("test")
        arity = guard_arity(test)
        if arity is None:
            return f"guard test {test!r} is not one of {sorted(GUARD_TESTS)} nor a global-state read"
        if node.attrs.get("kind") not in GUARD_KINDS:
            return f"guard kind {node.attrs.get('kind')!r} is not one of {sorted(GUARD_KINDS)}"
        if test == "call":
            kind, _, name = str(node.attrs.get("call", "")).partition(":")
            if kind not in CALL_FORMS or not name.replace(".", "").replace("_", "a").isalnum():
                return f"a call guard names a call 'kind:name' (kinds: {', '.join(CALL_FORMS)})"
        elif len(node.args) != arity or node.kwargs:
            return f"guard test {test!r} takes {arity} operand(s), got {len(node.args)}"
        if any(v is not None for v in node.outputs):
            return "a guard defines no values"
    return None


def grammar() -> str:
    """The table as text, for the grammar docstring."""
    return "\n".join(f"    {d.name:<22} {d.doc}" for d in _DEFS)
