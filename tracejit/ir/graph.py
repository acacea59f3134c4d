"""The IR: plain data describing a traced program.

Grammar (one method of one module, or one function)::

    Graph   := inputs: [Value], nodes: [Node], outputs: [Leaf], in_spec, out_spec
    Node    := op "(" args, kwargs ")" -> [Value]     with target, attrs, source
    Value   := a typed SSA value, produced by exactly one Node or a graph input
    Leaf    := Value | Python constant (None, int, float, bool, str, dtype, device)
    Type    := TensorType(dtype, shape, device, requires_grad) | ScalarType(kind)

Ops are named as PyTorch's dispatcher names them (``aten::conv2d``) with an
overload (``aten::add.Tensor``). ``target`` (a ``CallTarget``, ir/target.py)
says which Python entry point (``torch.conv2d``, ``Tensor.view``, ``+``) ran it
during tracing; codegen emits a call to it. tracejit's own ops live in the ``tracejit``
namespace; they are defined once, in ir/ops.py (``OPS``):

{ops}

A node's ``args`` / ``kwargs`` hold Values and constants, possibly inside
lists and tuples. Names are not part of the IR: the printer and codegen name
Values when they print.

Node attributes are plain data (``PLAIN_ATTR_TYPES``, ``is_plain``): what a file can hold. The live
objects a program runs sit in the Graph's tables, which attributes index or name: ``constants``
(tensors, attrs.index), ``callees`` (a call_module's Graph, by attrs.path and attrs.method),
``functions`` (a custom autograd Function the trace recorded, by attrs.function_id). The kernels the
in-memory lowering passes build are not the IR's: a ``tracejit::kernel`` node's attrs.index names one
in the lowered program's table (passes/lowered.py).
"""
from __future__ import annotations

from typing import Iterator

import torch

from .ops import grammar as _grammar
from .target import as_target
from ..records import FrozenRecord

__doc__ = __doc__.replace("{ops}", _grammar())


class TensorType(FrozenRecord):
    """A tensor value's dtype, shape (a tuple of ints), device (text) and requires_grad flag."""
    __slots__ = _fields = ("dtype", "shape", "device", "requires_grad")

    def __init__(self, dtype: torch.dtype, shape: tuple, device: str, requires_grad: bool = False):
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "requires_grad", requires_grad)

    @staticmethod
    def of(t: torch.Tensor) -> "TensorType":
        if t.is_nested:   # ragged: its sizes are not ints; -1 marks each dimension as varying
            return TensorType(t.dtype, (-1,) * t.dim(), str(t.device), bool(t.requires_grad))
        return TensorType(t.dtype, tuple(int(s) for s in t.shape), str(t.device), bool(t.requires_grad))

    def __str__(self) -> str:
        name = _DTYPE_NAMES.get(self.dtype, str(self.dtype).replace("torch.", ""))
        dims = ", ".join(str(s) for s in self.shape)
        return f"{name}({dims}{', ' if dims else ''}device={self.device})"


class ScalarType(FrozenRecord):
    """A non-tensor value: ``kind`` is "int", "float" or "bool"."""
    __slots__ = _fields = ("kind",)

    def __init__(self, kind: str):
        object.__setattr__(self, "kind", kind)

    def __str__(self) -> str:
        return self.kind


_DTYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
    torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
    torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool",
    torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}


class SourceLoc(FrozenRecord):
    """A line of the user's source: file name, line number, function name."""
    __slots__ = _fields = ("filename", "lineno", "function")

    def __init__(self, filename: str, lineno: int, function: str = ""):
        object.__setattr__(self, "filename", filename)
        object.__setattr__(self, "lineno", lineno)
        object.__setattr__(self, "function", function)

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"


class Value:
    """A typed SSA value. ``producer`` is the Node that makes it (None for inputs); ``hint``: a name to
    print it by; ``capture``: a graph input that is not one of the method's arguments but a tensor of the
    caller's scope the callee used without receiving it (lifted by the tracer, passed as ``_capture_<i>``
    by the caller's ``call_module`` node, after its arguments)."""

    __slots__ = ("type", "producer", "index", "hint", "dynamic", "capture")

    def __init__(self, type, producer=None, index=0, hint=None, dynamic=False, capture=False):
        self.type = type
        self.producer = producer
        self.index = index
        self.hint = hint
        self.dynamic = dynamic
        self.capture = capture

    def __repr__(self) -> str:
        return f"Value({self.type}, hint={self.hint!r})"


class Node:
    """One operation.

    Fields:
      op:      qualified op name with overload, e.g. ``aten::add.Tensor``
      target:  the Python entry point codegen calls, a ``CallTarget`` (ir/target.py:
               ``method:view``, ``fn:torch.add``, ``op:*``); None for tracejit ops handled by
               codegen itself. The constructor also takes the target's text.
      args, kwargs: Values and constants (lists / tuples nest)
      outputs: the Values it defines (``None`` in the list for a non-tensor
               result slot that nothing uses)
      attrs:   op-specific plain data (``path`` for get_attr / call_module ...)
      source:  the user's source line that ran it
      effectful: mutates one of its inputs (in-place op) or is otherwise not pure
    """

    __slots__ = ("op", "target", "args", "kwargs", "outputs", "attrs", "source", "effectful", "scope")

    def __init__(self, op, target, args=(), kwargs=None, attrs=None, source=None, effectful=False, scope=""):
        self.op = op
        self.target = as_target(target)
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.outputs: list = []
        self.attrs = dict(attrs or {})
        self.source = source
        self.effectful = effectful
        self.scope = scope

    def input_values(self) -> Iterator[Value]:
        yield from iter_values(self.args)
        yield from iter_values(tuple(self.kwargs.values()))

    @property
    def name(self) -> str:
        return self.op.split("::", 1)[-1].split(".", 1)[0]

    def __repr__(self) -> str:
        return f"Node({self.op})"


# what a node attribute may hold, nested in tuples, lists and str-keyed dicts: the values a file's JSON
# gives back (serialize/constants.py writes dtypes, devices, layouts and memory formats by name)
PLAIN_ATTR_TYPES = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.layout, torch.memory_format)


def is_plain(value, depth: int = 0) -> bool:
    """Is ``value`` plain data a node attribute may hold (``PLAIN_ATTR_TYPES``, nested)?"""
    if type(value) in PLAIN_ATTR_TYPES:
        return True
    if depth > 32:
        return False
    if type(value) in (tuple, list):
        return all(is_plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(type(k) is str and is_plain(v, depth + 1) for k, v in value.items())
    return False


def iter_values(obj) -> Iterator[Value]:
    """The Values in ``obj`` (nested in lists, tuples and dict values), depth first, in order. A plain item is
    skipped without a generator of its own (a load walks every node's arguments several times: session 30)."""
    if isinstance(obj, Value):
        yield obj
        return
    if isinstance(obj, dict):
        obj = obj.values()
    elif not isinstance(obj, (list, tuple)):
        return
    for item in obj:
        if isinstance(item, Value):
            yield item
        elif isinstance(item, (list, tuple, dict)):
            yield from iter_values(item)


def nodes_with_callees(graph) -> Iterator[Node]:
    """The nodes of ``graph`` and of every submodule graph it calls (``tracejit::call_module``, linked in
    ``Graph.callees``), each graph once however many paths reach it."""
    todo, seen = [graph], set()
    while todo:
        g = todo.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        for n in g.nodes:
            yield n
            if n.op == "tracejit::call_module":
                todo.append(g.callee(n))


def map_values(obj, fn):
    """Rebuild ``obj`` (nested lists / tuples / dicts) with every Value replaced by ``fn(value)``."""
    if isinstance(obj, Value):
        return fn(obj)
    if isinstance(obj, list):
        return [map_values(o, fn) for o in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(map_values(o, fn) for o in obj)
    if isinstance(obj, dict):
        return {k: map_values(v, fn) for k, v in obj.items()}
    return obj


class Graph:
    """A traced method: inputs, nodes in execution order, output leaves.

    Fields (the constructor takes each by keyword, or by position in this order):
      name, inputs, nodes, outputs;
      in_spec: pytree spec of (args, kwargs); input_leaves: per in_spec leaf, an input Value or a constant;
      out_spec: pytree spec of the result, its leaves map to ``outputs``;
      arg_names: a name per in_spec leaf, from the traced callable's parameters; param_names: the traced
      callable's parameter name per top-level argument;
      constants: tensors captured as constants; module_type: original class name, for printing;
      training: the traced module's training flag (root methods of a module), else None;
      call_budget: loaded from a file, its call-time budget plan (serialize/budget_plan.py);
      passes: what the inference pipeline did to get this graph, oldest first: one (pass name, nodes
      before, nodes after) per pass (passes/pipeline.run_passes);
      callees: (path, method) a call_module node names -> the callee's Graph: the graph's link table
      (filled by the tracer, migrate and the loader, as ``constants`` holds the tensors constant nodes
      index); attrs only name it;
      functions: function_id -> the custom autograd Function class a tracejit::autograd_function node
      calls in memory (a file holds its forward's ops).
    Not a field (not compared, printed or saved): ``memory_checks``, the checks an in-memory program runs before
    its code (support/global_guards.IdentityChecks: module-level tensors the trace captured, by identity; a
    file keeps no check of Python globals, so a loaded graph has none). Passes copy it (passes/graph_copy.py).
    ``==`` compares every field (as the dataclass it was did); a Graph is not hashable."""

    _FIELDS = ("name", "inputs", "nodes", "outputs", "in_spec", "input_leaves", "out_spec", "arg_names",
               "param_names", "constants", "module_type", "training", "call_budget", "passes", "callees",
               "functions", "exact_keys", "grad_exit")

    def __init__(self, name: str = "forward", inputs=None, nodes=None, outputs=None, in_spec=None,
                 input_leaves=None, out_spec=None, arg_names: tuple = (), param_names: tuple = (), constants=None,
                 module_type: str = "", training=None, call_budget=None, passes: tuple = (), callees=None,
                 functions=None, exact_keys: tuple = (), grad_exit=None):
        self.name = name
        self.inputs = [] if inputs is None else inputs
        self.nodes = [] if nodes is None else nodes
        self.outputs = [] if outputs is None else outputs
        self.in_spec = in_spec
        self.input_leaves = [] if input_leaves is None else input_leaves
        self.out_spec = out_spec
        self.arg_names = arg_names
        self.param_names = param_names
        self.constants = [] if constants is None else constants
        self.module_type = module_type
        self.training = training
        self.call_budget = call_budget
        self.passes = passes
        self.callees = {} if callees is None else callees
        self.functions = {} if functions is None else functions
        self.exact_keys = exact_keys   # ((input path, "file:line" that read its key set), ...): trace/input_keys.py
        self.grad_exit = grad_exit     # True / False: the grad mode forward leaves its caller in (trace/grad_mode.py)
        self.memory_checks = None      # in memory only (class docstring): an IdentityChecks, or None

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return tuple(getattr(self, f) for f in self._FIELDS) == tuple(getattr(other, f) for f in self._FIELDS)
        return NotImplemented

    __hash__ = None

    def callee(self, node: Node) -> "Graph":
        """The Graph that ``node`` (a ``tracejit::call_module`` of this graph) calls."""
        key = (node.attrs["path"], node.attrs["method"])
        try:
            return self.callees[key]
        except KeyError:
            raise KeyError(f"graph {self.name!r} calls {key[0]}.{key[1]}, which its link table does not hold "
                           f"(it holds {sorted(self.callees)})") from None

    def add_input(self, type, hint=None, dynamic=True, capture=False) -> Value:
        v = Value(type, None, len(self.inputs), hint, dynamic, capture)
        self.inputs.append(v)
        return v

    def add_node(self, node: Node, out_types, dynamic=False) -> Node:
        node.outputs = [None if t is None else Value(t, node, i, None, dynamic) for i, t in enumerate(out_types)]
        self.nodes.append(node)
        return node

    def __str__(self) -> str:
        return _formatter(self)   # ir/printer.format_graph

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes>"


_formatter = None   # ir/printer.py's format_graph, given by ir/printer.py at its import (it imports this module)


def set_formatter(format_graph) -> None:
    """Called by ir/printer.py at import (``tracejit.ir`` imports it): the function ``str(graph)`` uses."""
    global _formatter
    _formatter = format_graph
