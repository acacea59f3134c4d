"""A tensor attribute that forward set from None (or added) with a value computed from an input's data (hunt29).

``self.scale = None`` in ``__init__``; forward ``if self.scale is None: self.scale = x.abs().max().detach()``, then
``x / self.scale``: a calibration on the first call. Eager's later calls divide by the FIRST input's scale; a
recording of that first call computes ``x.abs().max()`` from every input (so does torch.jit's tracer), silently wrong.
python_state leaves plain tensor attributes set in forward to the recording (a capture: a rotary cache rebuilt
from sizes is recorded as it is rebuilt), so such a set-up is told apart here: its value in the root frame reaches
an input's data (not only its sizes). It is then a first-call set-up (python_state.FirstCallSetUpError): the next
call is recorded, reading the attribute as the tensor it holds. A value set inside a finished submodule call (its
frame is gone) is not seen here (as before).
"""
from __future__ import annotations

import torch

from ..ops.names import CONSTANT, GET_ATTR, SIZE_READS
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
    """Was tensor ``t`` computed, in the root frame of this thread's recording, from an input's data?"""
    tracer = get_tracer()
    if tracer is None or not tracer.frames:
        return False
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
        if node.op in (CONSTANT, GET_ATTR) or node.op in SIZE_READS:
            continue
        todo.extend(iter_values((node.args, node.kwargs)))
    return False
