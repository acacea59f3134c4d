"""Sessions pinned to the input shapes a server sees again.

onnxruntime runs a model whose input sizes it knows faster than one with symbolic axes: it folds the size math
(``Shape -> Gather -> Concat -> Reshape``), keeps convs in its blocked layout across residual adds, and the
onnxruntime backend computes a transformer's rows as matrices (export/token_rows.py) only where the sizes are
fixed. The backend's ``session`` is pinned to the traced shapes; other shapes run the dynamic model, which was
1.5x slower on BERT at another length and 1.8x on GPT-2 (bench/bench_pinned_shapes.py).

``PinnedShapes`` gives a set of input shapes its own pinned session once it has been called ``PIN_AFTER``
times: the session opens on a background thread (the call that asks for it, and those after it until it is
ready, run the dynamic model, so no call waits for a build; the interpreter's exit waits for one under way), at
most ``MAX_SHAPES`` of them and at most ``MAX_BYTES`` of model in all (each session holds its own copy of the weights). A shape whose session fails to
open stays on the dynamic model. The counts are forgotten after ``MAX_COUNTED`` distinct shapes, so a server
that never repeats a shape keeps no growing table.

A pinned session computes what the dynamic one does, up to onnxruntime's fusions (fp32 reassociation: the
token rows' residual add + layer norm run as two kernels instead of one, ~1e-7 on BERT); the calls of one shape
before and after its session opens may differ by that much.

>>> pins = PinnedShapes(lambda shapes: (lambda *a: shapes), model_bytes=10)
>>> key = ((2, 3),)
>>> pins.run_for(key) is None          # first call of the shape: the dynamic model runs
True
>>> _ = pins.run_for(key); pins.wait()  # the second asks for a session (opened on a thread)
>>> pins.run_for(key)()                 # later calls run the pinned one
((2, 3),)
"""
from __future__ import annotations

import threading
from typing import Callable

PIN_AFTER = 2           # calls of one shape before it gets its own session
MAX_SHAPES = 8          # pinned sessions a program keeps, besides the traced shapes'
MAX_BYTES = 1 << 30     # model bytes (one copy of the weights each) the pinned sessions may hold in all
MAX_COUNTED = 4096      # distinct shapes counted before the counts are forgotten


class PinnedShapes:
    """The pinned sessions' run functions of one program, by input shapes (module docstring)."""

    def __init__(self, open_pinned: Callable, model_bytes: int):
        self._open_pinned = open_pinned   # shapes -> the run function of a session pinned to them (may raise)
        self._limit = min(MAX_SHAPES, MAX_BYTES // max(model_bytes, 1))
        self._runs: dict = {}             # shapes -> run; read without the lock (a dict lookup is atomic)
        self._counts: dict = {}
        self._failed: set = set()
        self._lock = threading.Lock()
        self._builder: threading.Thread | None = None

    def run_for(self, shapes: tuple):
        """The pinned run for ``shapes`` (a tuple of the inputs' shapes), or None: the dynamic model runs (and
        this call counts towards pinning them)."""
        run = self._runs.get(shapes)
        if run is None and self._limit > 0:
            self._count(shapes)
        return run

    @property
    def pinned(self) -> tuple:
        """The input shapes that have a pinned session."""
        return tuple(self._runs)

    def forget(self, shapes: tuple) -> None:
        """Drop the session of ``shapes`` (its run failed and the runtime may keep the failure): counted again."""
        with self._lock:
            if shapes in self._runs:
                self._runs = {k: v for k, v in self._runs.items() if k != shapes}

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the session being opened (if any) is ready."""
        builder = self._builder
        if builder is not None:
            builder.join(timeout)

    def _count(self, shapes: tuple) -> None:
        with self._lock:
            if shapes in self._runs or shapes in self._failed:
                return
            if len(self._counts) >= MAX_COUNTED:
                self._counts.clear()
            seen = self._counts[shapes] = self._counts.get(shapes, 0) + 1
            if seen < PIN_AFTER or len(self._runs) >= self._limit or self._builder is not None:
                return
            # not a daemon: the interpreter's exit waits for a build under way, rather than tearing onnxruntime
            # down under it
            self._builder = threading.Thread(target=self._build, args=(shapes,), name="tracejit-pin-shapes")
            self._builder.start()

    def _build(self, shapes: tuple) -> None:
        run = None
        try:
            run = self._open_pinned(shapes)
        except Exception:  # noqa: BLE001  (shapes the pinned model cannot take: the dynamic model keeps them)
            pass
        with self._lock:
            if run is None:
                self._failed.add(shapes)
            else:
                self._runs = {**self._runs, shapes: run}   # a new dict: readers see the old one or the new one
            self._counts.pop(shapes, None)
            self._builder = None
