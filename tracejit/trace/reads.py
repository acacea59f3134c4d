"""What a trace reads out of a tensor: its sizes, properties and values.

A size read while tracing becomes a TracedInt bound to an ``aten::size`` node, so size
arithmetic is recorded; a size or value that ends up as a plain Python value is frozen:
it goes in the ledger (with a TracerWarning) and gets a guard. ``tracer`` is the recording
``Tracer`` (trace/recorder.py).
"""
from __future__ import annotations

from typing import Any

import torch

from ..ir import Node, ScalarType, Value
from . import boundary, dtype_reads, ops, provenance
from .ledger import torch_phrase
from .source import in_torch, user_location
from .symbolic import TracedInt

# how a traced size became a Python value -> the torch.jit warning phrase key for it
_SIZE_READS = {"int()": "__int__", "float()": "__float__", "bool()": "__bool__",
               "used as an index (range(), list slicing, ...)": "__index__"}
_COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")


def _size_read_key(how: str) -> str:
    """A comparison of sizes ends in a Python bool (torch: "a Python boolean")."""
    if any(how.startswith(f"used in '{op}'") for op in _COMPARISONS):
        return "__bool__"
    return _SIZE_READS.get(how, how)


# ---- symbolic ints ----------------------------------------------------------------------------
def new_int(tracer, value: int, node: Node) -> TracedInt:
    tracer.guards.scanner.event()   # an earlier line may have used a traced size as a list index
    ti = TracedInt(value)
    tracer.frame.bind(ti, node.outputs[0])
    return ti


def int_op(tracer, op: str, sym: str, value: int, operands) -> Any:
    """Record ``op`` on traced ints; a plain ``value`` when no operand is traced."""
    args = tuple(tracer.to_ir(o) for o in operands)
    if not any(isinstance(a, Value) for a in args):
        return value
    node = Node(op, f"op:{sym}", args, source=user_location(2))
    tracer.frame.graph.add_node(node, [ScalarType("int")], dynamic=True)
    return new_int(tracer, value, node)


def specialize_size(tracer, ti: TracedInt, how: str, value, method=None, other=None, outcome=None) -> None:
    """A traced size became a Python value (``how``): ledger entry and guard."""
    if tracer._int_value(ti) is None:
        return
    loc = user_location(3)
    # torch's own layers compare sizes to validate shapes; keep those in the ledger, warn for user code
    tracer.ledger.add("size", f"{torch_phrase(_size_read_key(how))}: a traced size was {how}", loc, value,
                      warn=loc is None or not in_torch(loc))
    tracer.guards.size(ti, how, value, loc, method, other, outcome)


# ---- sizes ------------------------------------------------------------------------------------
def sizes_of(tracer, t: torch.Tensor, dim=None):
    v = tracer.value_of(t)
    if not v.dynamic:
        return t.size() if dim is None else t.size(dim)
    if dim is not None:
        return _size(tracer, t, v, dim)
    tracer.guards.rank(t, "the trace read the tensor's whole shape", user_location(3))
    return torch.Size([_size(tracer, t, v, d) for d in range(t.dim())])


def _size(tracer, t, v: Value, dim: int):
    size = t.size(dim)
    node = Node("aten::size.int", "method:size", (v, dim), source=user_location(3))
    tracer.frame.graph.add_node(node, [ScalarType("int")], dynamic=True)
    return new_int(tracer, size, node)


def size_call(tracer, name, args, kwargs):
    """``t.size()``, ``t.size(d)``, ``t.numel()``, ``t.nelement()``."""
    t = args[0]
    if name in ("numel", "nelement"):
        v = tracer.value_of(t)
        n = t.numel()
        if not v.dynamic:
            return n
        node = Node("aten::numel.default", "method:numel", (v,), source=user_location(2))
        tracer.frame.graph.add_node(node, [ScalarType("int")], dynamic=True)
        return new_int(tracer, n, node)
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    return sizes_of(tracer, t, dim)


# ---- properties, values, iteration ------------------------------------------------------------
def property_read(tracer, func, args):
    """A tensor property (``t.shape``, ``t.device``, ``t.dtype``, ``t.T``, ...) read while tracing."""
    prop = getattr(func.__self__, "__name__", "")
    t = args[0]
    if prop == "shape":
        return sizes_of(tracer, t)
    if prop in ("dtype", "device"):
        dtype_reads.on_property(tracer, t, prop)
    elif prop in dtype_reads.DEVICE_PROPERTIES or prop == "itemsize":
        dtype_reads.on_method(tracer, prop, args)
    if prop == "device":
        dev = func(*args)
        if not tracer.ledger.entries or tracer.ledger.entries[-1].kind != "device":
            tracer.ledger.add("device", "a tensor's device was read", user_location(3), str(dev))
        provenance.note_read(tracer, t, prop, dev)
        return dev
    if prop == "ndim":
        tracer.guards.rank(t, "the trace read the tensor's number of dimensions (ndim)", user_location(3))
    result = func(*args)
    if prop == "dtype":
        provenance.note_read(tracer, t, prop, result)
    elif prop != "ndim" and not boundary.holds_tensor(result):
        boundary.on_result(tracer, func, prop, args, {}, result, form=f"attr:{prop}")
    if prop in ops.TENSOR_PROPERTIES and isinstance(result, torch.Tensor):
        aten = ops.TENSOR_PROPERTIES[prop]
        tracer.record(func, args, {}, result, (ops.qualify(aten, args, {}), f"attr:{prop}"))
    return result


def value_read(tracer, func, name, args, kwargs):
    """``item()``, ``bool(t)``, ``int(t)``, ...: a value out of a tensor, frozen and guarded."""
    result = func(*args, **kwargs)
    what = {"__bool__": "bool(tensor) / 'if tensor'", "__int__": "int(tensor)", "__float__": "float(tensor)",
            "__index__": "a tensor used as an index", "item": "tensor.item()", "tolist": "tensor.tolist()",
            "numpy": "tensor.numpy()"}.get(name, f"'{name}'")
    loc = user_location(2)
    tracer.ledger.add("value_read", f"{torch_phrase(name)}: {what} read a value out of a tensor, and the trace "
                      "cannot record that", loc, result if not hasattr(result, "shape") else args[0])
    tracer.guards.value(name, args, result, what, loc)
    if name in ("numpy", "__array__") and getattr(tracer, "python_state", None) is not None:
        tracer.python_state.numpy_views.add(result, loc)   # a write through it: trace/numpy_writes.py
    return result


def iteration(tracer, t):
    """``for row in x``: the number of items is fixed by the trace."""
    n = len(t) if t.dim() > 0 else 0
    loc = user_location(3)
    tracer.ledger.add("iteration", f"{torch_phrase('iteration')}: iterating over a tensor fixed the number of "
                      f"items to {n}", loc, n)
    tracer.guards.length(t, n, "iterating over a tensor", loc)
