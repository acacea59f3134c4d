"""Custom ``torch.autograd.Function`` calls while tracing.

The Function runs as usual (its forward's ops are recorded, each marked
``attrs["in_function"]``), then one ``tracejit::autograd_function`` node is
added whose outputs stand for what ``apply`` returned::

    tracejit::autograd_function(apply_args, forward_outputs)
        attrs: name (qualified class name), function_id, fn (the class; in memory only)

In memory, codegen emits ``Cls.apply(*apply_args)`` and skips the forward's
ops, so the Function's own backward runs. A file cannot hold the class: a
loaded program runs the recorded forward ops and passes their results through
``support.no_backward``, which raises a clear error if a gradient must flow
through the Function.
"""
from __future__ import annotations

import torch

from ..compat import call_classmethod
from ..errors import TraceError
from ..ir import Node, TensorType
from ..ops.names import AUTOGRAD_FUNCTION
from ..pytree import flatten
from .source import user_location
from .symbolic import get_tracer

OP = AUTOGRAD_FUNCTION


def traced_apply(tracer, original_apply, cls, args, kwargs):
    """``Function.apply`` while ``tracer`` (the calling thread's, or None) records; torch's own Functions
    and calls outside a trace run unchanged."""
    if tracer is None or get_tracer() is not tracer or cls.__module__.split(".")[0] == "torch" or not tracer.frames:
        return call_classmethod(original_apply, cls, *args, **kwargs)
    if kwargs:
        raise TraceError(f"{cls.__qualname__}.apply was called with keyword arguments at {user_location(2)}; "
                         "tracejit records custom autograd Functions called with positional arguments only")
    frame = tracer.frame
    loc = user_location(2)
    with torch._C.DisableTorchFunction():
        # the arguments as they are before the call: a forward that writes an input in place (``mark_dirty``)
        # rebinds it to its forward's ops, which the in-memory program skips
        arg_values = tuple(tracer.to_ir(tuple(args)))
    start = len(frame.graph.nodes)
    tracer.autograd_fn_depth = getattr(tracer, "autograd_fn_depth", 0) + 1
    try:
        result = call_classmethod(original_apply, cls, *args)
    finally:
        tracer.autograd_fn_depth -= 1
    _finish(tracer, frame, start, cls, args, arg_values, result, loc)
    return result


def _finish(tracer, frame, start, cls, args, arg_values, result, loc) -> None:
    with torch._C.DisableTorchFunction():
        function_id = getattr(tracer, "_autograd_fn_count", 0)
        tracer._autograd_fn_count = function_id + 1
        for node in frame.graph.nodes[start:]:
            node.attrs.setdefault("in_function", function_id)
        leaves, _ = flatten(result) if isinstance(result, (tuple, list)) else ([result], None)
        forward_outputs = tuple(_forward_value(tracer, frame, t, args, cls, loc) for t in leaves
                                if isinstance(t, torch.Tensor))
        node_args = (arg_values, forward_outputs)
        node = Node(OP, "", node_args, attrs={"name": cls.__qualname__, "function_id": function_id},
                    source=loc)
        if isinstance(result, (tuple, list)):
            node.attrs["unpack"] = len(result)
        types_ = [TensorType.of(t) if isinstance(t, torch.Tensor) else None for t in leaves]
        dynamic = any(v.dynamic for v in forward_outputs) or any(
            getattr(v, "dynamic", False) for v in node_args[0])
        frame.graph.add_node(node, types_, dynamic)
        frame.graph.functions[function_id] = cls
        for t, v in zip(leaves, node.outputs):
            if v is not None:
                frame.bind(t, v)
    tracer.ledger.add("autograd_function",
                      f"custom autograd Function {cls.__qualname__} is called as itself, so its backward runs; "
                      "a saved program holds its forward's ops and refuses a gradient through it",
                      loc, cls.__qualname__, warn=False)


def _forward_value(tracer, frame, t, args, cls, loc):
    """The recorded value of one tensor the Function returned (its forward's result, or an input it passed on)."""
    v = frame.env.get(id(t))
    if v is not None:
        return v
    for a in args:   # apply returns a new view of an input its forward returned as is
        if isinstance(a, torch.Tensor) and a.shape == t.shape and a.dtype == t.dtype and (
                a.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()):
            return tracer.value_of(a)
    raise TraceError(f"custom autograd Function {cls.__qualname__} (called at {loc}) returned a tensor that its "
                     "forward did not compute from recorded ops; tracejit cannot record it")
