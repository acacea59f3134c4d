"""Blocked conv regions chosen by timing the whole lowered program (issue #25 item 1).

passes/blocked_timing.py keeps a conv region blocked where its convs, timed one by one at their traced sizes, run
faster blocked. In a whole program that sum can mislead. On this repository's AVX-512 Xeon (one thread):

* GoogLeNet at batch 8 kept none of its regions: its 9 convs timed 5.5 ms plain against 5.2 to 9.7 ms blocked,
  from one build to the next. Yet the program with them ran 0.73x eager's time, against 0.91x without
  (torch.jit's freeze: 0.71x).
* DLA-34 at batch 8 ran 0.81-0.83x with every region, against 0.83-0.87x with the timed ones.

So where the structural rules allow other regions than the timing kept (``every_blocked_conv_region``), the
program is lowered both ways. Both are called on random inputs of the traced sizes and dtypes, interleaved
(``paired_timing.interleaved``, under its lock, ``ROUNDS`` samples each), within ``BUDGET_S``. The program with
every region is kept only where it takes at most ``MARGIN`` of the other's time.

Default-deny: the timed regions stay where
* the timing is off (``blocked_timing.MEASURE``);
* an input is not a floating-point tensor of a fixed size, the graph draws random numbers (calling it would
  advance the caller's generator; the region timing draws from a private one), or it writes in place into a
  constant or a preserved buffer, or a view of one (``passes.written.writes_state``, as auto_backend.py asks it:
  calling it would change the program's state);
* either program fails on the random inputs;
* or the budget runs out.

>>> import torch
>>> from tracejit.ir import Graph, TensorType
>>> g = Graph("forward")
>>> _ = g.add_input(TensorType(torch.float32, (2, 3), "cpu"), "x")
>>> [tuple(t.shape) for t in random_inputs(g)]
[(2, 3)]
>>> _ = g.add_input(TensorType(torch.int64, (2,), "cpu"), "n")
>>> random_inputs(g) is None          # an index tensor's values matter: not timed
True
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from ..ops import draws_random
from ..passes import blocked_timing
from ..passes.blocked_convs import blocked_conv_regions, every_blocked_conv_region
from ..passes.lowered import Lowered
from ..passes.paired_timing import LOCK, interleaved, random_input
from ..passes.pipeline import lower
from ..passes.written import writes_state

BUDGET_S = 5.0   # timing both programs stops here (a program of 0.4 s a call is not timed): the timed regions stay
MARGIN = 0.97    # every region is kept only at or under this share of the timed program's time
ROUNDS = 5       # interleaved samples of each program (the minimum counts): FCN-ResNet50 at batch 8, 0.95 whole,
                 # read over 0.97 in one build of two with paired_timing's 3


def lower_with_measured_regions(graph, passes, make_call: Callable[[Lowered], Callable]) -> Lowered:
    """``lower(graph, passes)``, or the program with every structural conv region where it times faster whole
    (module docstring). ``make_call(lowered)``: a callable running that lowered program on the graph's inputs."""
    chosen = lower(graph, passes)
    every_passes = _every_region_passes(passes)
    if every_passes is None or not blocked_timing.MEASURE:
        return chosen
    inputs = random_inputs(graph)
    if inputs is None or any(draws_random(n.op, n.args, n.kwargs) for n in graph.nodes) \
            or writes_state(graph):
        return chosen
    every = lower(graph, every_passes)
    if kernels_of(every) == kernels_of(chosen):
        return chosen
    return every if _faster(make_call, chosen, every, inputs) else chosen


def random_inputs(graph) -> Optional[list]:
    """Random tensors of ``graph``'s input types (``paired_timing.random_input``: the caller's generator is
    untouched), or None where an input is not a floating-point tensor of a fixed size on the CPU."""
    out = []
    for v in graph.inputs:
        t = getattr(v, "type", None)
        shape = getattr(t, "shape", None)
        if shape is None or not isinstance(t.dtype, torch.dtype) or not t.dtype.is_floating_point \
                or t.device != "cpu" or not all(isinstance(s, int) and s >= 0 for s in shape):
            return None
        out.append(random_input(shape, t.dtype))
    return out


def _every_region_passes(passes) -> Optional[tuple]:
    """``passes`` with the timed region pass swapped for the untimed one; None where it holds none."""
    if not any(fn is blocked_conv_regions for _, fn in passes):
        return None
    return tuple((name, every_blocked_conv_region if fn is blocked_conv_regions else fn) for name, fn in passes)


def kernels_of(lowered: Lowered) -> list:
    """What the lowered program runs, node by node (two lowerings with the same regions give the same list)."""
    return [(n.op, n.attrs.get("ops")) for n in lowered.graph.nodes]


def _faster(make_call, chosen: Lowered, every: Lowered, inputs: list) -> bool:
    """Does the program with every region take at most ``MARGIN`` of the timed one's time on ``inputs``?"""
    deadline = time.perf_counter() + BUDGET_S
    with LOCK, torch.no_grad():
        try:   # each program once: one that fails on random inputs is not timed (the timed regions stay)
            first, second = make_call(chosen), make_call(every)
            first(*inputs), second(*inputs)
        except Exception:  # noqa: BLE001
            return False
        times = interleaved(lambda: first(*inputs), lambda: second(*inputs), deadline, ROUNDS)
    return times is not None and times[1] <= MARGIN * times[0]
