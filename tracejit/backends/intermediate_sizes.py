"""Size guards on intermediate tensors, checked before an ONNX model runs (issue #20; backends/onnx_call.py).

A guard on the size of an intermediate tensor (``h = x.view(-1, 4); if h.shape[0] > 2``, ``h = lin(x).flatten();
if h.size(0) > 16``) cannot be held by an ONNX model, which keeps the traced branch for every size. The
onnxruntime / OpenVINO programs check such a guard before each run by evaluating the slice of the traced program
it reads on ``meta`` tensors of the call's input shapes (torch's shape functions: no data is read and nothing is
computed), so its expression over the input sizes is evaluated exactly, and raise the plain program's GuardError
naming the line when it fails. A slice that cannot run on meta tensors (checked once, on the example's shapes:
an op without a meta kernel, a device written in the code) runs on the call's own tensors under no_grad: it then
computes that slice, which gives the trace's own sizes.

A slice holding an op whose result's shape depends on the data (ATen's ``dynamic_output_shape`` tag: nonzero,
masked_select, boolean indexing, unique, ...; torchvision's nms; the one-argument ``where``, which ATen does not
tag: ``ops.has_data_dependent_shape``) cannot be evaluated from sizes: its guard is one of the model's guard
outputs (backends/guard_outputs.py), or, where the model has none, the backend refuses the program with
``ExportError`` naming the guard's line (default-deny), where the torch backend answers. (Before nms and ``where``
counted, the zoo's Mask R-CNN computed its region count before each run on the slice alone, which misses writes
through views (the transform's ``pad_img[...].copy_(img)``): 12 regions where the trace saw 9, a GuardError on the
example itself, and most of the network run twice per call.)
"""
from __future__ import annotations

import torch

from .. import pytree
from ..export.errors import ExportError
from ..ir import GUARD, Node, TensorType, Value
from ..passes.written import _may_alias
from ..ops import has_data_dependent_shape
from ..ops.custom import is_kept
from ..errors import GuardError
from ..ops.names import CONSTANT, GET_ATTR, split_name

META = torch.device("meta")


def tensor_slice(guard, producers: dict, nodes=()) -> dict:
    """{id(node): node} of every node ``guard`` reads, back to the graph's inputs, and of every node of ``nodes``
    (the graph's, in order) that writes in place into one of those values or a view of one (with what it
    reads): ``p = torch.empty_like(order); p[order] = arange(n)`` (transformers' mixture of experts) holds
    garbage without its write, and the slice then indexed with it."""
    found, todo = {}, list(guard.input_values())
    while True:
        while todo:
            node = producers.get(id(todo.pop()))
            if node is None or id(node) in found:
                continue
            found[id(node)] = node
            todo.extend(node.input_values())
        todo = _writes_into(found, nodes)
        if not todo:
            return found


def _writes_into(found: dict, nodes) -> list:
    """Adds to ``found`` each effectful node of ``nodes`` that writes into a value ``found`` makes (or a view of
    one, followed through ops that may alias); returns the values those writers read, for their producers."""
    made = {id(v) for n in found.values() for v in n.outputs if v is not None}
    reads = []
    for node in nodes:
        if id(node) in found:
            continue
        inputs = list(node.input_values())
        touches = any(id(v) in made for v in inputs)
        if touches and node.effectful and node.op != GUARD:
            found[id(node)] = node
            reads += inputs
        elif touches and node.op.startswith("aten::") and _may_alias(node.op):
            made.update(id(v) for v in node.outputs if v is not None)   # a view: writes into it count
            if any(w.effectful and w.op != GUARD and any(v in w.input_values() for v in node.outputs if v is not None)
                   for w in nodes):
                found[id(node)] = node
                reads += inputs
    return reads


def _data_dependent(node) -> bool:
    """Does the node's result shape depend on values (an ATen op or a kept custom op: nms)? ATen's tag says so
    for ``index.Tensor`` whatever its indices; with integer index tensors only (transformers'
    ``mask[batch_idx, kv_idx]``) the shape is the indices' broadcast shape: a function of sizes. A boolean (or
    uint8) index is a mask: data-dependent."""
    if not ((node.op.startswith("aten::") or is_kept(node.op)) and has_data_dependent_shape(node.op)):
        return False
    if split_name(node.op).name == "index" and len(node.args) == 2 and isinstance(node.args[1], (list, tuple)):
        return not all(i is None or (isinstance(i, Value) and hasattr(i.type, "dtype") and not i.type.dtype.is_floating_point
                                     and i.type.dtype not in (torch.bool, torch.uint8)) for i in node.args[1])
    return True


def refuse_data_dependent(guard, nodes, backend: str) -> None:
    """ExportError when a node of the slice has a data-dependent shape: the guard is no function of sizes."""
    for node in nodes:
        if _data_dependent(node):
            raise ExportError(
                f"the trace relied on the size of a tensor whose shape depends on the data ({node.op} at "
                f"{node.source}; the guard: {guard.attrs.get('what') or guard.attrs.get('test')}); the {backend} "
                "model cannot check it and would keep the traced branch for other values. Use the torch backend "
                "(optimize_for_inference(..., backend='torch')) or the traced program", node.op,
                guard.source or guard.attrs.get("line"))


def own_tensors(graph, traced, meta: bool) -> None:
    """Make each parameter / buffer ``graph`` reads a constant (the check runs without the module), and with
    ``meta`` every constant a meta tensor."""
    if meta:
        graph.constants = [c.to(META) if isinstance(c, torch.Tensor) else c for c in graph.constants]
    for node in graph.nodes:
        if node.op != GET_ATTR:
            continue
        t = _tensor_at(traced, node.attrs["path"]).detach()
        node.op, node.target = CONSTANT, None
        node.attrs = {"index": len(graph.constants)}
        graph.constants.append(t.to(META) if meta else t)


def runs_on_meta(check, graph) -> bool:
    """Does ``check`` run on meta tensors of the example's shapes? (An op without a meta kernel, a device
    written in the code, a data-dependent shape torch does not tag: then the check runs on the call's own
    tensors, which computes the slice: always the trace's own sizes.)"""
    leaves = [torch.empty(v.type.shape, dtype=v.type.dtype, device=META) if isinstance(v, Value) and
              hasattr(v.type, "shape") and all(d >= 0 for d in v.type.shape) else v for v in graph.input_leaves]
    if any(isinstance(v, Value) for v in leaves):
        return False
    args, kwargs = pytree.unflatten(graph.in_spec, leaves)
    try:
        with torch.no_grad():
            check(None, *args, **kwargs)
    except GuardError:
        return True   # it ran: the example's own guards hold on it, a failure here is its business
    except Exception:  # noqa: BLE001  (no meta evaluation: the real one)
        return False
    return True


def _tensor_at(module, path: str) -> torch.Tensor:
    *mods, last = path.split(".")
    for part in mods:
        module = module._modules[part]
    found = module._parameters.get(last)
    return found if found is not None else module._buffers[last]


def meta_arguments(args, kwargs):
    """The call's arguments with each tensor a meta tensor of its shape, strides and dtype (no copy of data)."""
    leaves, spec = pytree.flatten((tuple(args), dict(kwargs)))
    out = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=META) if isinstance(x, torch.Tensor)
           else x for x in leaves]
    return pytree.unflatten(spec, out)


class PassedSignatures:
    """The input signatures (each tensor's shape, strides and dtype; every other leaf's value) whose meta check
    passed. The meta check sees nothing else of a call (meta_arguments), so its answer is a function of the
    signature: a call with a signature seen to pass skips it (BERT-base's slice is 557 nodes, about a quarter of
    an onnxruntime call at one thread). A failing check is never remembered: it raises on every call. At most
    ``LIMIT`` signatures are kept (then forgotten all at once: each is checked again once)."""

    LIMIT = 256

    def __init__(self):
        self.seen: set = set()
        self.traced = None   # ((shape, dtype), ...): positional contiguous tensors of these pass (remember_traced)

    def remember_traced(self, check, graph) -> None:
        """Where the traced call is positional tensors only and ``check`` passes on contiguous meta tensors of their
        traced shapes and dtypes, remember them: a call of contiguous tensors of those shapes and dtypes (a server's
        usual call) is then known to pass without its signature key (0.4 us a tensor)."""
        args_spec, kwargs_spec = graph.in_spec.children
        if kwargs_spec.num_leaves or not all(c.kind == "leaf" for c in args_spec.children) or \
                not all(isinstance(v, Value) and isinstance(v.type, TensorType) and all(d >= 0 for d in v.type.shape)
                        for v in graph.input_leaves):
            return
        traced = tuple((torch.Size(v.type.shape), v.type.dtype) for v in graph.input_leaves)
        try:
            check(None, *(torch.empty(shape, dtype=dtype, device=META) for shape, dtype in traced))
        except Exception:  # noqa: BLE001  (not known to pass: every call's signature decides)
            return
        self.traced = traced

    def check(self, check, args, kwargs) -> None:
        """Run ``check`` on meta arguments unless the call's signature passed before."""
        traced = self.traced
        if traced is not None and not kwargs and len(args) == len(traced):
            for x, (shape, dtype) in zip(args, traced):
                if type(x) is not torch.Tensor or x.dtype is not dtype or x.shape != shape or not x.is_contiguous():
                    break
            else:
                return
        key = signature(args, kwargs)
        if key is not None and key in self.seen:
            return
        meta_args, meta_kwargs = meta_arguments(args, kwargs)
        check(None, *meta_args, **meta_kwargs)
        if key is not None:
            if len(self.seen) >= self.LIMIT:
                self.seen = set()
            self.seen.add(key)


def signature(args, kwargs):
    """A hashable key of what meta_arguments keeps of a call, or None (an unhashable leaf: not remembered).
    Positional plain tensors only (the common call) skip the pytree walk: their leaves are the arguments
    themselves, so the key is the same (pytree.flatten cost 5 of the 12 us a guarded onnxruntime call spent in
    Python around the run; bench_ort_overhead.py)."""
    if not kwargs and all(type(x) is torch.Tensor for x in args):
        return tuple((x.dtype, x.shape, x.stride()) for x in args)
    leaves, _ = pytree.flatten((tuple(args), dict(kwargs)))
    key = tuple((x.dtype, x.shape, x.stride()) if isinstance(x, torch.Tensor) else (type(x), x) for x in leaves)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def reads_tensors(nodes) -> bool:
    """Does a node of the kept slice compute a tensor (then the check runs on meta tensors)?"""
    return any(isinstance(v, Value) and hasattr(v.type, "shape") for n in nodes for v in n.outputs) or any(
        isinstance(n, Node) and n.op in (CONSTANT, GET_ATTR) for n in nodes)
