"""A tensor attribute that forward set from None (or added) with a value computed from an input's data (hunt29).

``self.scale = None`` in ``__init__``; forward ``if self.scale is None: self.scale = x.abs().max().detach()``, then
``x / self.scale``: a calibration on the first call. Eager's later calls divide by the FIRST input's scale; a
recording of that first call computes ``x.abs().max()`` from every input (so does torch.jit's tracer), silently wrong.
python_state leaves plain tensor attributes set in forward to the recording (a capture: a rotary cache rebuilt
from sizes is recorded as it is rebuilt), so such a set-up is told apart here: its value in the root frame reaches
an input's data (not only its sizes). It is then a first-call set-up (python_state.FirstCallSetUpError): the next
call is recorded, reading the attribute as the tensor it holds. A value set inside a submodule's call (``self.inner.scale``, set by
the submodule's own forward) is found through the Value its finished call kept (escapes.FinishedCalls; hunt30:
before, the program recomputed it from every input, silently; with the trace check on, a TracingCheckError).
"""
from __future__ import annotations

import torch

from ..ops.names import CAPTURE_OPS, CONSTANT, GET_ATTR, SIZE_READS, base_name
from ..ir import iter_values
from .carried_state import carried
from .symbolic import get_tracer


def tensor_attribute(out: list, path: str, m, key, was_none: bool) -> bool:
    """For python_state._changes: is attribute ``key`` of ``m`` a plain tensor now (True: python_state leaves it to
    the recording)? One set from None (or added) from an input's data is listed in ``out`` first: a set-up."""
    value = m.__dict__.get(key) if isinstance(key, str) else None
    if not isinstance(value, torch.Tensor):
        return False
    if was_none and from_input_data(value):
        out.append((path, m, key))
    return True


def is_set_up(m, key, before: dict, codes) -> bool:
    """For python_state's FirstCallSetUpError: is the change of ``key`` a first-call set-up (an attribute the module
    did not have, or a tensor from data set from None that the next call does not carry)?"""
    if not isinstance(key, str) or key not in vars(m):
        return False
    return key not in before or (isinstance(vars(m)[key], torch.Tensor) and not carried(key, codes))


def from_input_data(t, limit: int = 100_000) -> bool:
    """Was tensor ``t`` computed, in the root frame of this thread's recording or in a finished submodule call, from
    an input's data? (In a submodule, its call's inputs count as data: default-deny, the set-up path is eager's.)"""
    tracer = get_tracer()
    if tracer is None or not tracer.frames:
        return False
    value = tracer.finished.value_of(t)   # made inside a submodule's call (hunt30): its Value there, kept
    if value is None:
        value = tracer.frames[0].env.get(id(t))
    seen, todo = set(), [value] if value is not None and value.producer is not None else []
    while todo:
        v = todo.pop()
        if id(v) in seen or len(seen) > limit:
            continue
        seen.add(id(v))
        node = v.producer
        if node is None:   # an input of the traced method
            return not v.capture
        if node.op in (CONSTANT, GET_ATTR) or node.op in SIZE_READS or node.op in CAPTURE_OPS:
            continue
        skip = _metadata_args(base_name(node.op))
        todo.extend(iter_values(([a for i, a in enumerate(node.args) if i not in skip], node.kwargs)))
    return False


# ops whose tensor arguments at these positions give only their dtype, device or shape (``cache.type_as(x)``:
# transformers' Wav2Vec2-Conformer rotary cache): not a read of the input's data. An op missing here counts its
# arguments as data (the set-up path: eager's, stricter where the tensor was in fact rebuilt per call).
_METADATA_ARGS = {"type_as": {1}, "expand_as": {1}, "view_as": {1}, "reshape_as": {1}, "to": {1},
                  "new_zeros": {0}, "new_ones": {0}, "new_empty": {0}, "new_full": {0}, "new_tensor": {0},
                  "zeros_like": {0}, "ones_like": {0}, "empty_like": {0}, "full_like": {0}}


def _metadata_args(name: str) -> set:
    return _METADATA_ARGS.get(name, set())
