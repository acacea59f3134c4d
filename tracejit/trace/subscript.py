"""Recording ``x[idx]`` and ``x[idx] = v``: each index step becomes its own ATen op.

``indexing.plan`` decomposes the index; each step is run and recorded as
``aten::unsqueeze`` / ``select`` / ``slice`` / ``index`` (and ``index_put_`` / ``copy_`` /
``fill_`` for an assignment). An index the plan does not cover is recorded whole as
``tracejit::getitem`` / ``tracejit::setitem``. ``tracer`` is the recording ``Tracer``.
"""
from __future__ import annotations

import torch

from ..ir.target import indexing as index_form, method
from . import captured_writes, indexing
from .source import user_location


def getitem(tracer, func, args):
    t, idx = args
    idx = _lists_as_tensors(tracer, idx)
    _ellipsis_rank(tracer, t, idx)
    steps = indexing.plan(t.dim(), idx)
    if steps is None:
        result = func(*args)
        tracer.record(func, args, {}, result, ("tracejit::getitem", index_form("getitem")))
        return result
    cur = t
    for kind, dim, payload in steps:
        cur = _index_step(tracer, cur, kind, dim, payload)
    if cur is t:   # x[:] / x[...] is a view of x, as in eager
        cur = _index_step(tracer, t, "alias", 0, None)
    return cur


def setitem(tracer, func, args):
    t, idx, value = args
    captured_writes.note_write(tracer, t)   # a tensor held outside: a retrace puts it back, a second run refuses
    idx = _lists_as_tensors(tracer, idx)
    _ellipsis_rank(tracer, t, idx)
    steps = indexing.plan(t.dim(), idx)
    if steps is None or (steps and steps[-1][0] == "index" and
                         any(k == "unsqueeze" for k, _, _ in steps)):
        func(*args)
        tracer.record(func, args, {}, None, ("tracejit::setitem", index_form("setitem")))
        return None
    cur = t
    advanced = None
    for kind, dim, payload in steps:
        if kind == "index":
            advanced = payload
        else:
            cur = _index_step(tracer, cur, kind, dim, payload)
    with torch._C.DisableTorchFunction():
        if advanced is not None:
            indices = [None] * (max(d for d, _ in advanced) + 1)
            for d, ix in advanced:
                indices[d] = ix
            cur[tuple(slice(None) if i is None else i for i in indices)] = value
            spec = ("aten::index_put_.default", index_form("setitem_index"), (cur, indices, value))
        elif isinstance(value, torch.Tensor):
            cur.copy_(value)
            spec = ("aten::copy_.default", method("copy_"), (cur, value))
        else:
            cur.fill_(value)
            spec = ("aten::fill_.Scalar", method("fill_"), (cur, value))
    node = tracer.record(None, spec[2], {}, None, spec[:2])
    if node is not None:
        node.effectful = True
    return None


def _lists_as_tensors(tracer, idx):
    """Python lists in an index as eager reads them (torch's python_variable_indexing.cpp): a list inside a tuple
    is one index tensor (``x[..., [-2], :]``: Falcon; ``x[:, :, perm]``: timm's CSATv2), made by a recorded
    ``torch.tensor`` (a file can hold it: a ``tracejit::getitem`` could not be saved); a list as the whole
    index is a tuple of indices when it is short (< 32 items) and holds a tensor, sequence, slice, None or
    ``...``, else one index tensor."""
    if isinstance(idx, list):
        if len(idx) < 32 and any(isinstance(i, (torch.Tensor, list, tuple, slice)) or i is None or i is Ellipsis
                                 for i in idx):
            idx = tuple(idx)
        else:
            return _index_tensor(tracer, idx)
    if isinstance(idx, tuple) and any(isinstance(i, list) for i in idx):
        return tuple(_index_tensor(tracer, i) if isinstance(i, list) else i for i in idx)
    return idx


def _index_tensor(tracer, items: list):
    with tracer:   # recorded, as a torch.tensor call in the traced code would be
        return torch.tensor(items, dtype=torch.long) if not items else torch.tensor(items)


def _ellipsis_rank(tracer, t, idx) -> None:
    """``x[..., 0]`` is recorded with the dims the ellipsis stood for: that depends on the rank."""
    if idx is Ellipsis or (isinstance(idx, tuple) and any(i is Ellipsis for i in idx)):
        tracer.guards.rank(t, "an index with '...' was recorded with this number of dimensions",
                           user_location(3))


def _index_step(tracer, cur, kind, dim, payload):
    with torch._C.DisableTorchFunction():
        if kind == "unsqueeze":
            out = cur.unsqueeze(dim)
            spec = ("aten::unsqueeze.default", method("unsqueeze"), (cur, dim))
        elif kind == "select":
            out = cur.select(dim, int(payload))
            spec = ("aten::select.int", index_form("select"), (cur, dim, payload))
        elif kind == "slice":
            out = cur[(slice(None),) * dim + (payload,)]
            spec = ("aten::slice.Tensor", index_form("slice"), (cur, dim, payload.start, payload.stop,
                                                           1 if payload.step is None else payload.step))
        elif kind == "alias":
            out = cur.view_as(cur)
            spec = ("aten::view_as.default", method("view_as"), (cur, cur))
        else:
            indices = [None] * (max(d for d, _ in payload) + 1)
            for d, ix in payload:
                indices[d] = ix
            out = cur[tuple(slice(None) if i is None else i for i in indices)]
            spec = ("aten::index.Tensor", index_form("index"), (cur, indices))
    op, target, call_args = spec
    tracer.record(None, call_args, {}, out, (op, target))
    return out
