"""Caches keyed by shapes, as libraries write them (einops: ``functools.lru_cache`` on the recipe and the shape,
a module-level table of backends filled on the first call).

- A traced size hashed as a key is pinned (trace/number_escapes.py): its value is guarded, and arithmetic on it
  gives plain ints from then on. Before, the first trace recorded the size math of a cache miss and the
  checker's retrace got the cache's hit: "Graphs differed across invocations" (TracingCheckError) with the
  default ``check_trace=True``, for every einops model.
- An installed package's own globals (a file under site-packages) are not forward's state (trace/outer_state.py):
  a library filling its table on the first call traces; the same function in the user's own file is refused.
"""
from __future__ import annotations

import functools
import importlib
import sys
import textwrap
import warnings

import pytest
import torch
from torch import nn

import tracejit


@functools.lru_cache(maxsize=None)
def _plan(shape, heads):                 # einops' _reconstruct_from_shape: sizes computed once per shape
    b, n, c = shape
    return b, heads, n // heads, c


class SplitHeads(nn.Module):
    def forward(self, x):
        y = x.reshape(_plan(tuple(x.shape), 2))
        return (y * torch.arange(1, y.shape[2] + 1.0).view(1, 1, -1, 1)).sum(2)


def _quiet_trace(module, example, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        return tracejit.trace(module, example, **kw)


def test_an_lru_cache_keyed_by_the_shape_traces_with_the_default_check_and_follows_new_shapes(tmp_path):
    _plan.cache_clear()
    model = SplitHeads()
    example, new = torch.randn(2, 4, 3), torch.randn(3, 6, 3)
    traced = _quiet_trace(model, (example,))            # the checker's retrace hits the cache
    torch.testing.assert_close(traced(example), model(example))
    with pytest.warns(tracejit.TracerWarning, match="int.__hash__"):
        torch.testing.assert_close(traced(new), model(new))   # another shape: the key's guard retraces
    assert not torch.allclose(model(new).sum(), model(torch.randn(3, 6, 3)).sum())   # the inputs move the output
    traced.save(tmp_path / "split.pt")
    loaded = tracejit.load(tmp_path / "split.pt")
    torch.testing.assert_close(loaded(example), model(example))
    torch.testing.assert_close(loaded(new), model(new))     # the file holds both specializations
    with pytest.raises(tracejit.GuardError, match="test_library_caches.py"):
        loaded(torch.randn(1, 8, 3))                         # a third shape: no specialization fits


_LIBRARY = textwrap.dedent('''
    import torch
    _BACKENDS = {}

    def scale(x):
        kind = type(x).__name__
        if kind not in _BACKENDS:          # filled on the first call, as einops' _loaded_backends
            _BACKENDS[kind] = 2.0
        return x * _BACKENDS[kind]
''')


@pytest.mark.parametrize("installed", [True, False])
def test_a_library_table_filled_on_the_first_call(tmp_path, monkeypatch, installed):
    root = tmp_path / ("site-packages" if installed else "project")
    root.mkdir()
    name = f"tj_table_{'lib' if installed else 'user'}"
    (root / f"{name}.py").write_text(_LIBRARY)
    monkeypatch.syspath_prepend(str(root))
    lib = importlib.import_module(name)
    try:
        fn = lambda x: lib.scale(x) + 1   # noqa: E731
        if installed:
            traced = _quiet_trace(fn, (torch.randn(3),))
            x = torch.randn(5)
            torch.testing.assert_close(traced(x), x * 2 + 1)
        else:   # the user's own module-level cache: refused, naming the write (trace/outer_state.py)
            with pytest.raises(tracejit.TraceError, match="_BACKENDS"):
                _quiet_trace(fn, (torch.randn(3),))
    finally:
        sys.modules.pop(name, None)
