"""A failed guard leaves no trace: what a program wrote in place before a later guard is put back.

A program that writes in place (``img.div_(255)``, ``self.count.add_(1)``) and only then reaches a
guard would, when that guard fails, leave the write behind; the next specialization (or a
retrace) would write again: the caller's image divided by 255 twice, the counter +2. So each
root method gets an ``UndoPlan`` when it is compiled: the tensors that an in-place node before its
last guard may write into, found by following each written operand back through every op that
may return a view (passes/written.py's rule) to where it comes from: an input of the call, a
parameter or buffer (by path below the root), or a captured tensor. A call of such a method
first copies those tensors (all tensor arguments when an input is written: their order in the
call is not resolved here); a GuardError puts the copies back (shape and strides too, for
``t_()`` / ``unsqueeze_()``), so the next attempt starts from what the caller passed. A tensor
with autograd history gets its values back through autograd (``copy_`` from a clone that keeps
the history), so gradients are eager's. Methods without such writes pay nothing.
"""
from __future__ import annotations

import types

import torch
from torch.utils._pytree import tree_leaves

from ..errors import GuardError
from ..ir import Graph, Value, map_values, nodes_with_callees
from ..lazy_module import LazyModule
from ..pytree import flatten, unflatten
from .calling import call_checked

# only for a root method that writes in place before a guard (rare): a server's load does not import it (issue #22)
_written = LazyModule("..passes.written", __package__)

GUARD = "tracejit::guard"


class UndoPlan:
    """What to copy before a call: ``inputs`` (any input written), ``attrs`` (paths below the root:
    ``(path, kind)``), ``constants`` (captured tensors)."""

    def __init__(self, inputs: bool, attrs: tuple, constants: tuple):
        self.inputs, self.attrs, self.constants = inputs, attrs, constants

    def __repr__(self) -> str:
        return f"UndoPlan(inputs={self.inputs}, attrs={[p for p, _ in self.attrs]}, constants={len(self.constants)})"


def undo_plan(graph: Graph) -> UndoPlan | None:
    """The plan for ``graph`` (a root method; submodule calls are followed), or None: nothing it
    writes in place before a guard.

    The calls are followed where they stand, without copying the program into one graph: each call is a
    frame (the callee, its path below the root, its inputs bound to the caller's arguments), and the nodes
    are visited in the order inlining would give them (passes/inline.py), so the plan is the flat program's."""
    if not any(n.effectful and n.op != GUARD for n in nodes_with_callees(graph)):
        return None   # writes nothing in place anywhere (a load compiles many roots)
    frames: list = []
    try:
        return _plan(graph, frames)
    finally:
        for f in frames:   # a frame's table holds (value, frame) pairs: cycles, broken here for reference counting
            f.bound.clear()


def _plan(graph: Graph, frames: list) -> UndoPlan | None:
    steps = list(_flat_nodes(graph, _Frame(graph, "", frames), frames))
    last_guard = max((i for i, (n, _) in enumerate(steps) if n.op == GUARD), default=-1)
    todo = [r for n, f in steps[:last_guard] if n.effectful and n.op != GUARD
            for r in f.refs((n.args, tuple(n.kwargs.values()))) + [(o, f) for o in n.outputs if o is not None]]
    if not todo:
        return None
    inputs, attrs, constants = False, {}, {}
    seen: set[tuple] = set()
    while todo:
        v, frame = todo.pop()
        if (id(v), id(frame)) in seen:
            continue
        seen.add((id(v), id(frame)))
        producer = v.producer
        if producer is None:
            inputs = True
        elif producer.op == "tracejit::get_attr":
            attrs[frame.prefix + producer.attrs["path"]] = producer.attrs.get("kind", "parameter")
        elif producer.op == "tracejit::constant":
            t = frame.graph.constants[producer.attrs["index"]]
            if isinstance(t, torch.Tensor):
                constants[id(t)] = t
        elif producer.op not in _written.FRESH and _written._may_alias(producer.op):
            todo += frame.refs((producer.args, tuple(producer.kwargs.values())))
    if not (inputs or attrs or constants):
        return None
    return UndoPlan(inputs, tuple(attrs.items()), tuple(constants.values()))


class _Frame:
    """One call of ``graph`` at ``prefix`` (its module's path below the root, with a trailing dot):
    ``bound`` maps a callee input's id, and a call's output's id, to what it stands for in the flat program
    (a nested structure of ``(Value, frame)`` pairs and constants)."""

    def __init__(self, graph: Graph, prefix: str, frames: list):
        self.graph, self.prefix, self.bound = graph, prefix, {}
        frames.append(self)

    def resolve(self, obj):
        """``obj`` (a node's arguments, nested) with each Value replaced by what it is in the flat program."""
        return map_values(obj, lambda v: self.bound.get(id(v), (v, self)))

    def refs(self, obj) -> list:
        """The ``(Value, frame)`` pairs ``obj`` holds in the flat program, in the order of ``Node.input_values``."""
        out: list = []
        _pairs(self.resolve(obj), self, out)
        return out


def _pairs(obj, frame: _Frame, out: list) -> None:
    if type(obj) is tuple and len(obj) == 2 and isinstance(obj[0], Value) and type(obj[1]) is _Frame:
        out.append(obj)
    elif isinstance(obj, Value):   # inside a named tuple (map_values keeps those as they are): this frame's
        out.append((obj, frame))
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _pairs(item, frame, out)
    elif isinstance(obj, dict):
        for item in obj.values():
            _pairs(item, frame, out)


def _flat_nodes(graph: Graph, frame: _Frame, frames: list):
    """``(node, frame)`` for each node of the flat program, calls expanded in place as passes/inline.py does."""
    for node in graph.nodes:
        if node.op != "tracejit::call_module":
            yield node, frame
            continue
        callee = graph.callee(node)
        inner = _Frame(callee, f"{frame.prefix}{node.attrs['path']}.", frames)
        for v, a in zip(callee.inputs, node.args):
            inner.bound[id(v)] = frame.resolve(a)
        yield from _flat_nodes(callee, inner, frames)
        for v, o in zip(node.outputs, callee.outputs):
            if v is not None:
                frame.bound[id(v)] = inner.resolve(o)


def undoable_call(fn, owner, args, kwargs):
    """Call the compiled root method ``fn`` on ``owner``; on a GuardError, undo its writes first."""
    bound = types.MethodType(fn, owner)
    plan = getattr(fn, "undo", None)
    if plan is None:
        return call_checked(bound, fn.signature, args, kwargs, fn.graph)
    saved = _snapshot(plan, owner, args, kwargs)
    try:
        return call_checked(bound, fn.signature, args, kwargs, fn.graph)
    except GuardError:
        _restore(saved)
        raise


def _targets(plan: UndoPlan, owner, args, kwargs) -> list:
    found: dict[int, torch.Tensor] = {}
    if plan.inputs:
        for t in tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor):
                found.setdefault(id(t), t)
    for path, kind in plan.attrs:
        t = _attr(owner, path, kind)
        if isinstance(t, torch.Tensor):
            found.setdefault(id(t), t)
    for t in plan.constants:
        found.setdefault(id(t), t)
    return list(found.values())


def _attr(owner, path: str, kind: str):
    *mods, last = path.split(".")
    m = owner
    for part in mods:
        m = getattr(m, "_modules", {}).get(part)
        if m is None:
            return None
    store = getattr(m, "_buffers" if kind == "buffer" else "_parameters", {})
    return store.get(last)


def _snapshot(plan: UndoPlan, owner, args, kwargs) -> list:
    out = []
    for t in _targets(plan, owner, args, kwargs):
        if t.is_sparse or t.is_nested:
            continue
        with_history = t.requires_grad and not t.is_leaf and torch.is_grad_enabled()
        copy = t.clone() if with_history else t.detach().clone()
        out.append((t, copy, with_history, t.size(), t.stride(), t.storage_offset()))
    return out


def _restore(saved: list) -> None:
    for t, copy, with_history, size, stride, offset in saved:
        if t.size() != size or t.stride() != stride or t.storage_offset() != offset:
            with torch.no_grad():
                t.as_strided_(size, stride, offset)
        if with_history:
            t.copy_(copy)   # through autograd: t's gradient reaches its history again
        else:
            with torch.no_grad():
                t.copy_(copy)


def inputs_for_retrace(args, kwargs):
    """Copies of the call's tensor arguments for tracing the original again: the retrace runs the
    original's in-place writes on them, not on the caller's tensors (the chosen specialization then
    writes once, as one eager call). A tensor passed twice is copied once.

    A copy keeps what the guards read of the tensor (the boundary rule's metadata guards): its leaf-ness
    and requires_grad, its strides, storage offset and view-ness (a view of a fresh storage of the same
    size), its inference flag, version counter, conjugate / negative bits and shared memory; a tensor with autograd history keeps it (a clone).
    What no copy can have is that history's last op (``grad_fn``, ``output_nr``): when the guard that
    failed read it (``keep_history``), a tensor with history is passed itself, and
    ``RetraceInputs.check_untouched`` makes sure the retrace did not write into it."""
    return RetraceInputs(args, kwargs).inputs


# guards on a tensor's autograd history that no copy can pass (boundary.py's ``call`` guards)
HISTORY_READS = frozenset({"attr:grad_fn", "attr:output_nr"})


def reads_history(errors) -> bool:
    """Did one of these GuardErrors come from a guard on an input's ``grad_fn`` / ``output_nr``?"""
    return any(getattr(e, "guard", None) is not None and e.guard.attrs.get("call") in HISTORY_READS for e in errors)


class RetraceInputs:
    """``inputs``: the (args, kwargs) a retrace runs on (``inputs_for_retrace``); ``own``: the caller's
    tensors passed themselves (``keep_history``), with their version and a copy of their values."""

    def __init__(self, args, kwargs, keep_history: bool = False):
        self.keep_history = keep_history
        leaves, spec = flatten((args, kwargs))
        memo: dict[int, torch.Tensor] = {}
        self.own = []
        out = []
        for x in leaves:
            if isinstance(x, torch.Tensor) and not x.is_sparse and not x.is_nested:
                if id(x) not in memo:
                    memo[id(x)] = self._for_retrace(x)
                x = memo[id(x)]
            out.append(x)
        self.inputs = unflatten(spec, out)

    def _for_retrace(self, x: torch.Tensor) -> torch.Tensor:
        if x.grad_fn is not None:
            if not self.keep_history:
                return x.clone()   # the history goes on through the clone: gradients reach the caller's leaves
            with torch.no_grad():
                self.own.append((x, x._version, x.clone()))
            return x
        with torch.inference_mode(x.is_inference()), torch.no_grad():
            y = _with_bits(x)
        if x.requires_grad:
            y.requires_grad_(True)
        if not x.is_inference() and y._version != x._version and _set_version is not None:
            _set_version((y,), (x._version,))
        return y

    def check_untouched(self, what: str) -> None:
        """After the retrace: a tensor passed itself that was written in place gets its values back, and the
        call fails with GuardError (the specialization would write a second time, and the write changed its
        autograd history)."""
        written = [x for x, version, _ in self.own if x._version != version]
        if not written:
            return
        with torch.no_grad():
            for x, version, values in self.own:
                if x._version != version:
                    x.copy_(values)
        raise GuardError(f"{what}: the trace does not fit these inputs, and tracing the original again wrote in "
                         "place into an input that has autograd history (grad_fn), which tracejit passes to the "
                         "retrace itself (a copy cannot keep its grad_fn). Its values were put back. Call the "
                         "program on a tensor without history (x.detach()), or trace the original with such inputs")


_set_version = getattr(torch._C._autograd, "_unsafe_set_version_counter", None)


def _with_bits(x: torch.Tensor) -> torch.Tensor:
    """A copy with ``x``'s lazy conjugate / negative bits and its shared memory (``is_conj()``, ``is_neg()``,
    ``is_shared()``: metadata guards read them): the bit resolved, copied, set again."""
    if x.is_conj():
        return _with_bits(x.conj()).conj()
    if x.is_neg():
        return torch._neg_view(_with_bits(torch._neg_view(x)))
    y = _same_layout_copy(x)
    if x.is_shared() and not y.is_shared() and x.device.type == "cpu":
        y.share_memory_()
    return y


def _same_layout_copy(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` with its strides and storage offset: a view of a fresh storage of the same size when
    ``x`` is a view or starts past its storage's beginning (``torch.empty`` does not touch the rest)."""
    if not (x._is_view() or x.storage_offset() != 0) or x.device.type == "meta" or x.is_quantized:
        return x.clone()
    size = x.untyped_storage().nbytes() // x.element_size()
    base = torch.empty(size, dtype=x.dtype, device=x.device)
    y = base.as_strided(x.size(), x.stride(), x.storage_offset())
    y.copy_(x)
    return y
