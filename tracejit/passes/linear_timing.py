"""Does oneDNN's linear pay on the machine that runs it, at the size the program traced? Measured there, not
assumed (issue #25 item 1).

passes/linear_kernels.py hands a large constant-weight linear (and the activation after it) to oneDNN
(kernels/onednn_linear.py). Whether that pays depends on the CPU and the shape, not on the multiply-add count alone:
on an AVX-512 Xeon, one thread, AlexNet's 9216 x 4096 and 4096 x 4096 classifier at batch 1 (a matrix-vector
product) made the optimized program 1.09x its traced program's time with the kernels and 0.92x without, while the
same layers at batch 8 ran in oneDNN at 0.4x torch's time (bench/RESULTS.md, thirtieth and thirty-first passes). A
fixed bound (``MIN_MACS``) set on one CPU cannot say that. So the pass times each linear both ways at its traced
input shape: torch's ``linear`` on the plain weight followed by the activation op the traced program runs, and the
kernel's call (oneDNN with the activation fused), in interleaved rounds on a random contiguous input (the time does
not depend on the values), and uses the kernel only where it takes at most ``MARGIN`` of torch's time.
``runs_in_onednn`` (the structural rule: a CPU float32 weight, at least ``MIN_MACS`` multiply-adds) stays in front
as a cheap pre-filter: a linear below it is not timed at all.

The timing machinery is passes/paired_timing.py's, shared with the blocked conv regions (passes/blocked_timing.py).
Each linear's times are kept for the process (``_TIMES``, keyed by its weight's shape, its bias, its activation,
its input shape and the thread count), so BERT's twelve layers measure three linears once. Timing one program's
linears stops at ``BUDGET_S``: a linear not measured by then stays torch's (default-deny: a linear nobody measured
keeps the traced program's op).

``MEASURE = False`` skips the timing and keeps every linear the structural rule keeps: the tests that pin the
pass's rewrite set it (their shapes are too small, and their verdicts would move with the machine's load).

>>> import time, torch
>>> from tracejit.kernels.onednn_linear import OneDnnLinear
>>> kernel = OneDnnLinear(torch.randn(512, 256), torch.randn(512), "gelu")
>>> isinstance(linear_pays(kernel, (64, 256), deadline()), bool)
True
"""
from __future__ import annotations

import time

import torch

from ..kernels.onednn_activation import recorded
from .paired_timing import interleaved, measured, random_input

MEASURE = True
MARGIN = 0.97        # oneDNN's call must take at most this share of torch's linear + activation
BUDGET_S = 5.0       # timing one program's linears stops here; a linear not measured by then stays torch's

_TIMES: dict[tuple, tuple[float, float]] = {}   # linear key -> (torch s, oneDNN s) per call


def deadline() -> float:
    """The ``time.perf_counter()`` value at which timing the linears of the program lowered now stops."""
    return time.perf_counter() + BUDGET_S


def linear_pays(kernel, shape: tuple, until: float) -> bool:
    """Is ``kernel`` (a ``OneDnnLinear``) at most ``MARGIN`` of torch's linear + its activation on an input of
    ``shape``, timed here before ``until`` (a ``time.perf_counter()`` value)? (module docstring)"""
    if not MEASURE:
        return True
    times = measured(_TIMES, _key(kernel, shape), lambda: _time_linear(kernel, shape, until), until)
    return times is not None and times[1] <= MARGIN * times[0]


def _key(kernel, shape) -> tuple:
    return (tuple(kernel.weight.shape), kernel.bias is not None, kernel.activation, tuple(kernel.scalars),
            tuple(shape))


def _time_linear(kernel, shape, until: float):
    """(torch's linear + activation, the kernel's call) per call on a random input of ``shape``, or None when
    the timing would not end by ``until``."""
    x = random_input(shape)
    weight, bias, activation, scalars = kernel.weight, kernel.bias, kernel.activation, kernel.scalars
    return interleaved(lambda: recorded(activation, torch._C._nn.linear(x, weight, bias), scalars),
                       lambda: kernel(x), until)
