"""Which input dimensions a traced graph keeps symbolic: ``inspect``'s signatures and the viewer's
shapes (``Float[s0, 3, 224, 224]``) both read them here.

The IR marks no dimension as symbolic by itself (a Value's type holds the example's sizes, and
``Value.dynamic`` says only that the value came from the inputs). What it does record is every
size the trace read at run time: an ``aten::size.int`` node on the tensor. A dimension of a
graph input is shown as symbolic (``s0``, ``s1``, ...) when the graph, or a submodule graph it
passes the input to (``tracejit::call_module``), reads it that way and no guard pins it to one
value (a ``tracejit::guard`` that the size equals a constant). Dimensions the graphs never read
are not symbolic here: the IR cannot say whether the program accepts other sizes there (most ops
do, a size baked into a constant does not); ``inspect`` and the viewer ask the program itself, on
the meta device (viewer/sizes.py), and name those it accepts moved.
"""
from __future__ import annotations

from .graph import Value
from .ops import GUARD

SIZE_OP = "aten::size.int"
CALL_MODULE = "tracejit::call_module"
_PINS = {("eq", True), ("ne", False)}   # guard (test, expected) pairs that hold a size to one value
_MAX_DEPTH = 64


def symbolic_dims(graph) -> dict:
    """``{(id(input Value), dim): "sN"}`` for the graph inputs' dimensions it keeps symbolic."""
    inputs = {id(v): v for v in graph.inputs if isinstance(v, Value) and hasattr(v.type, "shape")}
    reads, pinned = {}, set()   # reads: id(size Value) -> (id(root input), dim)
    _collect(graph, {k: k for k in inputs}, reads, pinned, 0, set())
    order = list(dict.fromkeys(key for key in reads.values() if key not in pinned))
    position = {id(v): i for i, v in enumerate(graph.inputs)}
    order.sort(key=lambda k: (position.get(k[0], 0), k[1]))
    return {key: f"s{i}" for i, key in enumerate(order)}


def _collect(graph, subjects: dict, reads: dict, pinned: set, depth: int, done: set) -> None:
    """Size reads and pins in ``graph`` of the values in ``subjects`` (id(Value) -> id(root input)).
    ``done`` holds the (graph, subjects) pairs already walked: a graph called many times with the same
    inputs (a module reachable by many paths) is walked once, so the walk is linear in the program."""
    memo = (id(graph), frozenset(subjects.items()))
    if memo in done:
        return
    done.add(memo)
    local = {}   # id(size Value) in this graph -> (id(root input), dim)
    for node in graph.nodes:
        if node.op == SIZE_OP and len(node.args) >= 2 and node.outputs and node.outputs[0] is not None:
            subject, dim = node.args[0], node.args[1]
            if isinstance(subject, Value) and id(subject) in subjects and isinstance(dim, int) \
                    and hasattr(subject.type, "shape"):
                rank = len(subject.type.shape)
                if -rank <= dim < rank:
                    local[id(node.outputs[0])] = (subjects[id(subject)], dim % rank)
        elif node.op == GUARD and _pins(node.attrs):
            for a in node.args:
                if isinstance(a, Value) and id(a) in local and not any(isinstance(b, Value) for b in node.args
                                                                          if b is not a):
                    pinned.add(local[id(a)])
        elif node.op == CALL_MODULE and depth < _MAX_DEPTH and (node.attrs.get("path"), node.attrs.get("method")) \
                in graph.callees:
            callee = graph.callee(node)
            passed = {id(c): subjects[id(a)] for c, a in zip(_callee_inputs(callee, node), node.args)
                      if isinstance(a, Value) and id(a) in subjects and c is not None}
            if passed:
                _collect(callee, passed, reads, pinned, depth + 1, done)
    reads.update(local)


def _pins(attrs: dict) -> bool:
    """A guard that holds a size to one value (its ``expected`` may be anything the file says)."""
    test, expected = attrs.get("test"), attrs.get("expected")
    return type(expected) in (bool, int) and any(test == t and expected == e for t, e in _PINS)


def _callee_inputs(callee, node) -> list:
    """The callee's input Value for each of the call node's args (None where a constant is bound)."""
    n_cap = node.attrs.get("n_captures", 0) or 0
    plain = [leaf for leaf in callee.input_leaves if isinstance(leaf, Value)]
    captures = [v for v in callee.inputs if v.capture]
    n_plain = len(node.args) - n_cap
    return plain[:n_plain] + [None] * (n_plain - len(plain)) + captures[:n_cap]
