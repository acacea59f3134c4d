"""Recording: a TorchFunctionMode that writes each PyTorch call into a Graph.

Ops are recorded where Python first enters PyTorch's C++ operator library
(``torch.conv2d``, ``Tensor.view``, ``torch._C._nn.linear``). Python helpers
inside torch (``F.interpolate``, ``F.relu``, ``Tensor.__rsub__``) are traced
through: the mode stays active inside them, so the C++ ops they call are
recorded instead. Submodule calls open a new Frame with a Graph of its own.

This module is the mode itself: which Value a tensor is, the dispatch, and the
recording of a call as a Node. Reads of sizes, properties and values are in
reads.py, ``x[idx]`` / ``x[idx] = v`` in subscript.py.
"""
from __future__ import annotations

import sys
import types

import torch
from torch.overrides import TorchFunctionMode

from ..compat import redispatch_function
from ..errors import TraceError
from .. import ops as op_facts
from ..ir import Graph, Node, TensorType, Value, iter_values
from ..ir.target import function
from ..ops import custom as custom_ops
from ..pytree import flatten
from . import (boundary, captured_writes, dtype_reads, grad_mode, int_tensors, len_reads, ops, pieces, provenance,
               reads, self_results, subscript, torch_rounding)
from .escapes import FinishedCalls
from .guards import GuardMaker
from .ledger import Ledger, torch_phrase
from .source import in_torch, user_location
from .provenance import TracedFloat
from .symbolic import TracedInt

_VALUE_READS = {"item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "__complex__",
                "__array__", "equal", "is_nonzero"}


def internal(method):
    """Run tracejit's own bookkeeping with torch functions undispatched (no recording of itself)."""
    def wrapper(*args, **kwargs):
        with torch._C.DisableTorchFunction():
            return method(*args, **kwargs)
    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


class Frame:
    """One method call being recorded: its graph and the tensors it knows."""

    def __init__(self, graph: Graph, module, path: str, parent: "Frame | None"):
        self.graph = graph
        self.module = module
        self.path = path
        self.parent = parent
        self.env: dict[int, Value] = {}
        self.keep: list = []
        self.captures: list[tuple[Value, Value]] = []   # (value in parent, input value here)

    def bind(self, obj, value: Value) -> None:
        self.env[id(obj)] = value
        self.keep.append(obj)


class Tracer(TorchFunctionMode):
    """Records PyTorch calls into the current Frame's Graph."""

    def __init__(self, root_module=None, ledger: Ledger | None = None, force_outplace: bool = False,
                 registry: tuple | None = None):
        super().__init__()
        self.ledger = ledger or Ledger()
        self.force_outplace = force_outplace
        self.frames: list[Frame] = []
        self.module_paths: dict[int, str] = {}
        self.param_names: dict[int, list[str]] = {}
        # module path -> method name -> graph, and the dedup keys; shared by the methods of one trace_module
        self.methods, self._method_keys = registry if registry is not None else ({}, {})
        self._python_calls: list = []
        self.unguarded_reads: list = []   # reads torch's own code made that no guard can check (boundary.py)
        self.guards = GuardMaker(self)
        self.training_reads: dict[str, bool] = {}   # submodule path -> its training flag, read (module_flags.py)
        self.training_written: set[str] = set()     # submodule paths whose flag forward set itself
        self.python_state = None   # trace/python_state.PythonStateWatch, set by trace/api.record
        self.rng_seeded = False    # forward seeded or made a generator: later draws are never dropped (rng_record.py)
        self.captured: dict = {}   # id(tensor) -> (tensor, SourceLoc): each captured as a constant (attribute_tensors.py)
        self.outside_writes: list = []   # tensors held outside the trace written in place (captured_writes.py)
        self.written_storages: set = set()   # data pointers of every storage written in place (captured_writes.py)
        self.draws: list = []   # (op base name, device, seeded) of each random draw recorded (trace/attempts.py)
        self.finished = FinishedCalls()   # tensors of finished submodule calls their callers do not know (escapes.py)
        self.through: frozenset = frozenset()   # submodule paths whose calls go into their caller's graph (api.record)
        if root_module is not None:
            for path, m in root_module.named_modules(remove_duplicate=False):
                self.module_paths.setdefault(id(m), path)
            for name, p in root_module.named_parameters(remove_duplicate=False):
                self.param_names.setdefault(id(p), []).append(name)
            for name, b in root_module.named_buffers(remove_duplicate=False):
                self.param_names.setdefault(id(b), []).append(name)

    # ---- values -------------------------------------------------------------------------------
    @property
    def frame(self) -> Frame:
        return self.frames[-1]

    def value_of(self, t, frame: Frame | None = None) -> Value:
        frame = frame or self.frames[-1]
        v = frame.env.get(id(t))
        if v is not None:
            return v
        names = self.param_names.get(id(t))
        if names and frame.module is not None:
            prefix = frame.path + "." if frame.path else ""
            for n in names:
                if n.startswith(prefix):
                    return self._get_attr(frame, t, n[len(prefix):])
        if frame.parent is not None and self._known_outside(t, frame.parent):
            outer = self.value_of(t, frame.parent)
            inner = frame.graph.add_input(outer.type, dynamic=outer.dynamic, capture=True)
            frame.captures.append((outer, inner))
            frame.bind(t, inner)
            return inner
        return self._constant(frame, t)

    def _known_outside(self, t, frame: Frame | None) -> bool:
        while frame is not None:
            if id(t) in frame.env or (id(t) in self.param_names and frame.module is not None):
                return True
            frame = frame.parent
        return False

    def _get_attr(self, frame: Frame, t, rel: str) -> Value:
        *mods, last = rel.split(".")
        owner = frame.module
        for part in mods:
            owner = owner._modules[part]
        kind = "parameter" if last in owner._parameters else "buffer"
        node = Node("tracejit::get_attr", "", attrs={"path": rel, "kind": kind}, source=user_location(3))
        frame.graph.add_node(node, [TensorType.of(t)], dynamic=False)
        v = node.outputs[0]
        v.hint = rel.replace(".", "_")
        frame.bind(t, v)
        return v

    def _constant(self, frame: Frame, t) -> Value:
        self.finished.refuse_escaped(t, frame, user_location(3))
        grad_mode.refuse_free_tensor_needing_grad(t, user_location(3))
        if isinstance(t, torch.nn.Parameter) or t.requires_grad:
            what = "a parameter or tensor that requires grad and is not a parameter of the traced module"
        else:
            what = "a tensor that is neither an input, a parameter nor a buffer"
        shape = "nested" if t.is_nested else tuple(t.shape)
        self.ledger.add("constant", f"{what} (shape {shape}, dtype {t.dtype}) was captured as a constant",
                        user_location(3), t)
        graph = frame.graph
        node = Node("tracejit::constant", "", attrs={"index": len(graph.constants)}, source=user_location(3))
        graph.constants.append(t.detach() if not isinstance(t, torch.nn.Parameter) else t)
        self.captured.setdefault(id(t), (t, node.source))
        graph.add_node(node, [TensorType.of(t)], dynamic=False)
        frame.bind(t, node.outputs[0])
        return node.outputs[0]

    def to_ir(self, obj):
        """Replace tensors and traced ints in ``obj`` by graph Values."""
        if isinstance(obj, torch.Tensor):
            return self.value_of(obj)
        if isinstance(obj, TracedInt):
            v = self._int_value(obj)
            return v if v is not None else int.__int__(obj)
        if isinstance(obj, provenance.TracedFloat):
            v = self._int_value(obj)
            return v if v is not None else float(obj)
        if isinstance(obj, torch._C.Generator):   # one forward made (rng_record.py), else a captured object
            v = self._int_value(obj)
            return v if v is not None else obj
        if isinstance(obj, (list, tuple)):
            items = [self.to_ir(o) for o in obj]
            return items if isinstance(obj, list) else tuple(items)
        if isinstance(obj, dict):
            return {k: self.to_ir(v) for k, v in obj.items()}
        if type(obj).__module__ == "numpy" and hasattr(obj, "dtype") and obj.dtype.kind in "iuf" and not obj.shape:
            return obj.item()   # a numpy int / float scalar: torch takes it as the Python number it holds
        return obj

    def generator_value(self, g) -> Value | None:
        """The Value of a generator forward made (trace/rng_record.py), seen from the current frame."""
        return self._int_value(g)

    def pin(self, ti: TracedInt) -> None:
        """``ti``'s value is guarded: from now on it is that constant in every frame (number_escapes.py)."""
        for frame in self.frames:
            frame.env.pop(id(ti), None)

    def _int_value(self, ti: TracedInt, frame: Frame | None = None) -> Value | None:
        frame = frame or self.frames[-1]
        v = frame.env.get(id(ti))
        if v is not None:
            return v
        if frame.parent is not None:
            outer = self._int_value(ti, frame.parent)
            if outer is not None:
                inner = frame.graph.add_input(outer.type, dynamic=True, capture=True)
                frame.captures.append((outer, inner))
                frame.bind(ti, inner)
                return inner
        return None

    # ---- symbolic ints: called by TracedInt (symbolic.py), run undispatched --------------------
    int_op = internal(reads.int_op)
    specialize_size = internal(reads.specialize_size)

    # ---- the mode -----------------------------------------------------------------------------
    def __torch_function__(self, func, types_, args=(), kwargs=None):
        try:
            return self._dispatch(func, types_, args, kwargs)
        except Exception as e:
            if self.python_state is not None:   # caught by the traced code? (trace/python_state.py)
                self.python_state.op_raised(func, e)
            raise

    def _dispatch(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if args and isinstance(args[0], TracedFloat):   # torch.ceil(h / p) (torch_rounding.py)
            rounded = torch_rounding.rounding(func, args, kwargs)
            if rounded is not torch_rounding.NOT_ROUNDING:
                return rounded
        name = getattr(func, "__name__", "")
        if name == "__get__":
            return reads.property_read(self, func, args)
        if name in ("size", "numel", "nelement") and (isinstance(func, types.MethodDescriptorType) or (
                name == "numel" and len(args) == 1 and isinstance(args[0], torch.Tensor))):
            return reads.size_call(self, name, args, kwargs)
        if name in _VALUE_READS:
            return reads.value_read(self, func, name, args, kwargs)
        if name in ("dim", "ndimension") and args and isinstance(args[0], torch.Tensor):
            self.guards.rank(args[0], f"the trace read the tensor's number of dimensions ({name}())",
                             user_location(2))
        if name in boundary.EXCEPTIONS:
            if name in dtype_reads.DTYPE_METHODS or name in dtype_reads.DEVICE_METHODS:
                dtype_reads.on_method(self, name, args)   # a Python answer that depends on the dtype / device
            return func(*args, **kwargs)
        if name in boundary.FORMATTING:   # repr(x), str(x), f"{x:.0f}": guarded on the text
            result = func(*args, **kwargs)
            boundary.on_result(self, func, name, args, {}, result, depth=2)
            return result
        if name == "__getitem__" and not isinstance(func, types.FunctionType):
            return subscript.getitem(self, func, args)
        if name == "__setitem__" and not isinstance(func, types.FunctionType):
            return subscript.setitem(self, func, args)
        if name in ("register_hook", "register_post_accumulate_grad_hook"):
            raise TraceError(f"Tensor.{name} was called while tracing at {user_location(2)}: tensor backward "
                             "hooks cannot be part of a traced program; register them on the traced module's "
                             "outputs instead")
        if name == "__len__" and isinstance(args[0], torch.Tensor) and self.value_of(args[0]).dynamic:
            if len_reads.asked_by_builtin(args[0]) and args[0].dim():   # len(t): t.size(0) (len_reads.py)
                return reads.sizes_of(self, args[0], 0)
            self.ledger.add("size", f"{torch_phrase('len')}: len(tensor) returns a plain Python int, so the trace fixes it; use "
                            "tensor.size(0) to keep it symbolic", user_location(2),
                            args[0].shape[0] if args[0].dim() else 0)
            if args[0].dim():
                self.guards.length(args[0], args[0].shape[0], "len(tensor)", user_location(2))
        if name == "unbind" and _called_from_tensor_iter():
            reads.iteration(self, args[0])
            result = func(*args, **kwargs)
            self.record(func, args, kwargs, result, quiet_pieces=True)
            return result
        kept = custom_ops.kept_op(func)
        if kept is not None:   # a reviewed custom op (torchvision's nms, roi_align): one node, not traced through
            result = func(*args, **kwargs)
            self.record(func, args, kwargs, result, (kept, function(custom_ops.call_path(kept))))
            return result
        if not _is_builtin(func):
            if func not in self._python_calls or ops.reentered_from_python():
                # trace through the Python helper: the mode stays on for the ops it calls
                self._python_calls.append(func)
                before = len(self.unguarded_reads)
                try:
                    with self:
                        result = redispatch_function(func, types_, args, kwargs)
                finally:
                    self._python_calls.pop()
                boundary.refuse_helper_result(self, func, result, before)
                return result
            # the helper called its C++ twin (``super().unflatten(...)``, ``_VF.broadcast_tensors``), which
            # reports the Python helper as the function: run and record the C++ function itself
            func = ops.cpp_twin(func)
        captured_writes.note(self, name, args, kwargs)   # a retrace puts back what it writes into captured tensors
        if self.force_outplace and _is_inplace(name):
            return self._outplace(func, name, args, kwargs)
        pieces.guard_count(self, name, args, kwargs)   # the count of results the program unpacks (pieces.py)
        result = func(*_plain_sizes(args), **_plain_sizes(kwargs))
        result = self_results.distinct_result(name, args, kwargs, result)
        self.record(func, args, kwargs, result)
        return result

    def record(self, func, args, kwargs, result, op_target=None, quiet_pieces=False) -> Node | None:
        self.guards.scanner.event()   # sizes used as list indices on the lines run since (index_reads.py)
        frame = self.frame
        leaves, _ = flatten(result) if isinstance(result, (tuple, list)) else ([result], None)
        if not any(isinstance(x, torch.Tensor) for x in leaves):
            if not isinstance(result, TracedInt):   # the boundary rule: guarded, refused or an exception
                boundary.on_result(self, func, getattr(func, "__name__", ""), args, kwargs, result)
            if result is not None and not isinstance(result, (tuple, list)):
                return None
        kwargs = ops.torch_kwarg_names(getattr(func, "__name__", ""), kwargs)   # `axis=` -> `dim=` (the schema's)
        op, target = op_target or ops.describe(func, args, kwargs)
        node_args = self.to_ir(tuple(args))
        node_kwargs = self.to_ir(dict(kwargs))
        loc = user_location(3)
        node_args, node_kwargs = provenance.relate(self, node_args, node_kwargs, loc)
        node_args, node_kwargs = int_tensors.read_ints(frame.graph, op, node_args, node_kwargs, loc)
        dynamic = any(v.dynamic for v in iter_values((node_args, node_kwargs)))
        node = Node(op, target, node_args, node_kwargs, source=loc,
                    effectful=_is_inplace(op_facts.base_name(op)) or "out" in node_kwargs)
        if isinstance(result, (tuple, list)):
            node.attrs["unpack"] = len(result)
        types_ = [TensorType.of(x) if isinstance(x, torch.Tensor) else None for x in leaves]
        grad_mode.mark(self, node)
        frame.graph.add_node(node, types_, dynamic)
        for x, v in zip(leaves, node.outputs):
            if v is not None:
                frame.bind(x, v)
        base = node.name
        if op_facts.pieces_follow_size(base) and dynamic and isinstance(result, (tuple, list)) and not quiet_pieces:
            loc = node.source
            self.ledger.add("size", f"'{base}' split a tensor into {len(result)} pieces; the trace fixes that "
                            "number", loc, len(result), warn=loc is None or not in_torch(loc))
        if op_facts.draws_random(base, args, kwargs):   # ATen's nondeterministic_seeded tag (ops/aten.py)
            node.attrs["nondeterministic"] = True
            if self.rng_seeded:   # the draw moves a stream the program seeded: DCE keeps it (rng_record.py)
                node.attrs["seeded"] = True
            self.ledger.add("nondeterministic", f"random op {op}", node.source, None)
            device = next((x.device for x in leaves if isinstance(x, torch.Tensor)), None)
            self.draws.append((base, device, self.rng_seeded))   # a second run may redraw privately (attempts.py)
        return node

    def _outplace(self, func, name, args, kwargs):
        """_force_outplace: record ``x.add_(y)`` as ``x = x.add(y)``; eager still mutates x."""
        out_name = name[:-1] if name.endswith("_") else name.replace("__i", "__", 1)
        out_func = getattr(torch.Tensor, out_name, None)
        result = func(*args, **kwargs)
        if out_func is None:
            self.record(func, args, kwargs, result)
            return result
        with torch._C.DisableTorchFunction():
            on_view = isinstance(args[0], torch.Tensor) and args[0]._base is not None
        if on_view:
            self.ledger.add("outplace_view", f"_force_outplace recorded the in-place '{name}' on a view as "
                            f"'{out_name}': the view's base is not updated by the traced program, and this "
                            "might cause the trace to be incorrect", user_location(3), name)
        op, target = ops.describe(out_func, args, kwargs)
        node = self.record(out_func, args, kwargs, result, (op, target))
        if node is not None:
            node.effectful = False
        return result


def _plain_sizes(x):
    """``x`` (an op's args or kwargs) with each traced size a plain int, nested in lists and tuples.

    The node records each traced size as the Value it is bound to (``to_ir``), so the generated code passes
    the size of each call, and whatever the op's C++ reads of it (``torch.tensor(h, dtype=torch.float32)``
    reads ``float(h)``) is replayed: such a read needs no guard. A size bound to no Value is recorded as its
    number, as its reads were (``specialize_size`` guards only bound sizes)."""
    if isinstance(x, TracedInt):
        return int.__int__(x)
    if isinstance(x, dict):
        return {k: _plain_sizes(v) for k, v in x.items()} if any(_holds_size(v) for v in x.values()) else x
    if type(x) in (list, tuple) and any(_holds_size(v) for v in x):
        return type(x)(_plain_sizes(v) for v in x)
    return x


def _holds_size(x) -> bool:
    return isinstance(x, TracedInt) or (type(x) in (list, tuple) and any(_holds_size(v) for v in x))


def _called_from_tensor_iter() -> bool:
    """Is the current unbind the one ``Tensor.__iter__`` makes (``for row in x``)?"""
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            return False
        if f.f_code.co_name == "__iter__" and f.f_code.co_filename.endswith("_tensor.py"):
            return True
        f = f.f_back
    return False


def _is_builtin(func) -> bool:
    return isinstance(func, (types.BuiltinFunctionType, types.MethodDescriptorType,
                             types.WrapperDescriptorType, types.MethodWrapperType, types.BuiltinMethodType))


def _is_inplace(name: str) -> bool:
    if name.startswith("__i") and name.endswith("__"):
        return True
    return name.endswith("_") and not name.endswith("__")

