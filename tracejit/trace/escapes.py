"""Tensors a submodule's call computed that reach its caller other than through the call's return value.

A submodule call is recorded as a ``call_module`` node of its own graph: its caller knows the tensors the call
returned, nothing else. A tensor the call computed and handed out another way (appended to a list its caller
passed in, stored by a forward hook into a dict the caller reads: transformers' output capturing, written into a
container the caller holds) is unknown to the caller's frame; the recorder would freeze it as a constant, the
example's tensor, and every call would answer it (silently, where it needs no grad: under ``no_grad``, the common
way to trace). ``FinishedCalls`` remembers, by weak reference, the tensors of every finished submodule call that its
caller does not know; a tensor about to become a constant that one of them computed stops the recording
(``EscapedTensorError``, naming the line and the submodule's path), where it depends on a tensor (its data: an
input, a parameter or buffer, one updated in place later would leave the constant stale; or its sizes:
``torch.arange(x.shape[0])``, a causal mask of the input's length, which the caller, not having read the size,
could not guard, hunt29); one made from constants alone stays frozen. trace/attempts.py then records forward again with that submodule's call
traced through in place, so the tensor is known where it is read; where the first run changed state a caller sees,
the error stands.

>>> import torch, tracejit
>>> class Inner(torch.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.register_buffer("calls", torch.zeros(()))
...     def forward(self, x, store):
...         self.calls += 1   # written in place: a second run would count twice
...         store.append(x * 2)
...         return x + 1
>>> class Outer(torch.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.inner = Inner()
...     def forward(self, x):
...         store = []
...         return self.inner(x, store) + store[0]
>>> with torch.no_grad():
...     tracejit.trace(Outer(), torch.ones(2))
Traceback (most recent call last):
  ...
tracejit.errors.TraceError: a tensor (shape (2,), dtype torch.float32) computed inside submodule 'inner' ...
"""
from __future__ import annotations

import weakref

import torch

from ..errors import TraceError
from ..ir import iter_values
from ..ops.names import CONSTANT, GET_ATTR


_NOT_COMPUTED = (CONSTANT, GET_ATTR)   # tensors the call found, not made: a later call finds them too


def _reads_data(value, limit: int = 100_000) -> bool:
    """Does ``value`` depend on a tensor the call received or found (an input, a capture, a parameter or buffer),
    through its data or its sizes, not only on constants? A size read counts (hunt29: a tensor made from sizes
    alone, frozen by the caller, had no guard: the size was read in the callee's frame). (BEiT's relative
    position index, built from sizes and cached by ``lru_cache`` across layers, still traces: probed in hunt29.)
    A walk past ``limit`` values answers yes (default-deny)."""
    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if len(seen) > limit:
            return True
        node = v.producer
        if node is None or node.op == GET_ATTR:   # an input of the call (or a capture), a parameter or buffer
            return True
        if node.op == CONSTANT:
            continue
        todo.extend(iter_values((node.args, node.kwargs)))
    return False


class EscapedTensorError(TraceError):
    """A finished submodule call's tensor reached its caller another way than the call's return value.
    ``through``: the submodule paths whose calls, traced through in place (trace/through.py), would make the tensor
    known where it is read (trace/api.record retraces with them, where the failed attempt changed nothing)."""

    def __init__(self, message: str, through: frozenset):
        super().__init__(message)
        self.through = through


def paths_to_trace_through(callee: str, reader: str) -> frozenset:
    """The submodule paths from below the nearest common ancestor of ``reader`` (the frame that read the tensor)
    and ``callee`` (the finished call that computed it) down to ``callee``: traced through, each call hands what
    it knew to its caller, up to that ancestor, which then knows the tensor.

    >>> sorted(paths_to_trace_through("encoder.layer.0", ""))
    ['encoder', 'encoder.layer', 'encoder.layer.0']
    >>> sorted(paths_to_trace_through("encoder.layer.0", "pooler"))
    ['encoder', 'encoder.layer', 'encoder.layer.0']
    >>> sorted(paths_to_trace_through("a.b.c", "a.x"))
    ['a.b', 'a.b.c']
    """
    parts, reads = callee.split("."), reader.split(".") if reader else []
    common = 0
    while common < min(len(parts), len(reads)) and parts[common] == reads[common]:
        common += 1
    return frozenset(".".join(parts[:i]) for i in range(common + 1, len(parts) + 1))


class FinishedCalls:
    """The tensors of finished submodule calls that their callers do not know (see the module doc)."""

    def __init__(self):
        self._by_id: dict[int, tuple] = {}   # id(tensor) -> (weak reference, the submodule's path)
        self._made_in: dict[int, tuple] = {}   # id(tensor) -> (weak reference, its Value in the INNERMOST call)
        self.escaped: frozenset = frozenset()   # paths to trace through, from every escape refused (even if caught)

    def remember(self, child, parent) -> None:
        """After ``child``'s call (a Frame) returned into ``parent``'s: remember what it computed and kept."""
        for obj in child.keep:
            if not isinstance(obj, torch.Tensor) or id(obj) in parent.env:
                continue
            value = child.env.get(id(obj))
            producer = getattr(value, "producer", None)
            if producer is None or producer.op in _NOT_COMPUTED:   # an input, a capture, a constant, an attribute
                continue
            if not _reads_data(value):   # made from constants alone
                continue
            try:
                self._by_id[id(obj)] = (weakref.ref(obj), child.path)
                made = self._made_in.get(id(obj))
                if made is None or made[0]() is not obj:   # the call that made it finishes first: keep its Value
                    self._made_in[id(obj)] = (self._by_id[id(obj)][0], value)
            except TypeError:   # a tensor type without weak references: nothing to tell later
                pass

    def value_of(self, t):
        """The Value ``t`` had in the innermost finished call that computed it (None: no finished call did);
        data_set_ups.py reads where it came from."""
        hit = self._made_in.get(id(t))
        return hit[1] if hit is not None and hit[0]() is t else None

    def refuse_escaped(self, t, frame, where) -> None:
        """Raise TraceError if ``t`` (about to be frozen as a constant in ``frame``) was computed by a finished call."""
        hit = self._by_id.get(id(t))
        if hit is None or hit[0]() is not t:
            return
        caller = f"submodule '{frame.path}'" if frame.path else "the traced code"
        shape = "nested" if t.is_nested else tuple(t.shape)
        self.escaped |= paths_to_trace_through(hit[1], frame.path)
        raise EscapedTensorError(
            f"a tensor (shape {shape}, dtype {t.dtype}) computed inside submodule '{hit[1]}' reached {caller} at "
            f"{where or '(line unknown)'} other than through that submodule's return value (a list or dict passed "
            "in, a forward hook, a container held outside): tracejit records a submodule call by its inputs and "
            "outputs, so the program would answer the example's tensor at every call. Return the tensor from the "
            "submodule's forward (or compute it in the caller), then trace again", self.escaped)
