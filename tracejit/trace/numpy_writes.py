"""Writes into a tensor through its numpy view (hunt25): ``a = x.numpy(); a[0] = 5`` changes ``x``'s memory where
no TorchFunctionMode sees it, so a traced program would skip the write (the caller's ``x`` unchanged, the
answers computed from the old values), silently.

reads.value_read hands each array ``tensor.numpy()`` / ``np.asarray(tensor)`` (``__array__``) returned while
tracing to ``NumpyViews.add``, which keeps a copy; after forward, python_state asks ``changed()``: an array that
no longer equals its copy was written. Default-deny: a change that a recorded in-place torch op on the same
tensor made (``x.add_(1)`` after the read) cannot be told apart from a write through numpy, and is refused
too (read the values with ``.tolist()`` or ``x.numpy().copy()`` instead).
"""
from __future__ import annotations

import numpy as np   # numpy is a dependency (pyproject.toml)

MAX_ELEMENTS = 1 << 20   # a larger view is not copied (its writes stay unseen: a documented gap)


class NumpyViews:
    """The arrays that share memory with traced tensors, each with a copy of its values at the read."""

    def __init__(self):
        self._views: list = []   # (array, copy, SourceLoc)

    def add(self, array, loc) -> None:
        if isinstance(array, np.ndarray) and array.size <= MAX_ELEMENTS and array.base is not None:
            self._views.append((array, array.copy(), loc))

    def changed(self) -> list:
        """The source locations of the reads whose array was written since."""
        out = []
        for array, copy, loc in self._views:
            same = array.shape == copy.shape and np.array_equal(array, copy, equal_nan=array.dtype.kind in "fc")
            if not same:
                out.append(loc)
        self._views.clear()
        return out
