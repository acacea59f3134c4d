"""Size rule of ``aten::as_strided(self, size, stride, storage_offset=None)``: a view of ``self``'s memory with
sizes and strides of its own. transformers' Longformer and LED make their overlapping attention chunks so
(``hidden_states.as_strided(size=chunk_size, stride=chunk_stride)``: each chunk starts half a chunk after the last).

What a file could do with it, and what holds it:

- **read outside the tensor.** A view reaches ``self``'s whole storage, not only its elements: an input that is a
  slice of a bigger batch (another caller's rows) would be readable. So the view must lie within ``self``'s own
  elements: ``self`` contiguous, ``storage_offset`` (``self``'s when None) at or after ``self``'s, and the view's
  last element at or before ``self``'s last. Strides may not be negative. (ATen checks the storage's bounds, the
  overflow of the size computation and negative strides itself; this is stricter.)
- **outgrow it.** Sizes with a zero stride view one element 2^40 times (as ``expand`` does), which the next op
  copies: the view counts its elements against the budget.

Checked at load on the traced shapes (sizes and strides that are the file's constants) and before every call on
the real tensor (ValueError: LoadError at load, GuardError at call time).
"""
from __future__ import annotations

import math

import torch

from .op_sizes import _ints, _shape


def _dense(t) -> bool:
    """Do ``t``'s elements fill ``numel`` consecutive places, each once (contiguous up to an order of its
    dimensions: a transposed tensor is; a slice with gaps or an expanded one is not)? A traced input at load: as
    traced (checked again at the call)."""
    if not isinstance(t, torch.Tensor) or t.device.type == "meta":
        return True
    expected = 1
    for step, n in sorted((s, n) for n, s in zip(t.shape, t.stride()) if n != 1):
        if step != expected:
            return False
        expected *= n
    return True


def as_strided(b):
    """The view's elements, after checking that it lies within ``self``'s elements."""
    x, size, stride, offset = b.get("self"), _ints(b.get("size")), _ints(b.get("stride")), b.get("storage_offset")
    shape = _shape(x)
    if stride is not None and any(s < 0 for s in stride):
        raise ValueError(f"as_strided to strides {stride[:8]}: none may be negative")
    if shape is None or size is None or stride is None or not (offset is None or _ints(offset) is not None):
        return None
    if len(size) != len(stride) or any(s < 0 for s in size):
        raise ValueError(f"as_strided to sizes {size[:8]} and strides {stride[:8]}: one stride per size, none "
                         "negative")
    if not _dense(x):
        raise ValueError("as_strided of a tensor whose elements are not dense in memory (a slice with gaps, an "
                         "expanded tensor): its view could reach past them")
    elements = math.prod(size)
    if elements == 0:
        return 0
    span = sum((n - 1) * s for n, s in zip(size, stride))
    if not (isinstance(x, torch.Tensor) and x.device.type != "meta"):   # at load: where the input starts is not known
        if span >= math.prod(shape):
            raise ValueError(f"as_strided to sizes {size[:8]} and strides {stride[:8]} spans {span + 1} elements, "
                             f"outside the tensor's own {math.prod(shape)}")
        return elements
    base = x.storage_offset()
    start = base if offset is None else offset
    last = start + span
    if start < base or last >= base + math.prod(shape):
        raise ValueError(f"as_strided to sizes {size[:8]}, strides {stride[:8]} and offset {start} reaches elements "
                         f"{start}..{last}, outside the tensor's own {base}..{base + math.prod(shape) - 1}")
    return elements
