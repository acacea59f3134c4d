"""Does a blocked conv region pay on the machine that runs it? Measured there, not assumed (issue #25 item 1).

passes/blocked_convs.py keeps a conv net's feature maps in oneDNN's blocked layout where a region is large
enough. Whether that pays depends on the CPU: on one machine FCN-ResNet50 at batch 1 ran 0.84x eager's time with
its regions blocked; on another (an AVX-512 Xeon, one thread) dla34 at batch 1 ran 1.27x the traced program's time
with them and 0.92x without (bench/RESULTS.md, thirtieth pass), and torch.jit's freeze, which converts the same
way, was slower than eager there too. So the pass times each region's convs both ways at their traced sizes:
torch's ``conv2d`` on a plain tensor (for a graph conv_layout.py made channels-last: conv_kernels.py's ``OneDnnConv``,
its weight prepacked, on a channels-last one: torch's conv2d reorders a channels-last weight on every call, which
made ResNet-18's convs at batch 8 look 1.5x slower than they run), and ``BlockedConv`` on a blocked one, plus the
region's conversions (each
one ``to_mkldnn`` or ``to_dense`` of its first conv's input), in interleaved rounds on random inputs (a conv's time
does not depend on its values), and keeps the region blocked only where the blocked total is under
``MARGIN`` of the plain one.

The timing machinery is passes/paired_timing.py's, shared with the oneDNN linears (passes/linear_timing.py).
Each conv's timing is kept for the process (``_TIMES``, keyed by its weight's shape, its arguments, its input
shape and the thread count), so a second program or specialization with the same convs measures nothing. A region
whose convs cannot all be timed within ``BUDGET_S`` stays plain (default-deny: a region nobody measured keeps
torch's ops).

``MEASURE = False`` skips the timing and keeps every region the structural rules keep in a graph that is not
channels-last, and none in one that is (default-deny: its channels-last convs stay): the tests that pin the
pass's rewrite set it (their shapes are too small for the measurement to choose the blocked form).

>>> import torch
>>> w = torch.randn(16, 16, 3, 3)
>>> spec = (w, None, (1, 1), (1, 1), (1, 1), 1)
>>> isinstance(region_pays([(spec, (1, 16, 32, 32))] * 3, conversions=2), bool)
True
"""
from __future__ import annotations

import time

import torch

from ..kernels.onednn_blocked import BlockedConv, ToBlocked, ToDense
from ..kernels.onednn_conv import OneDnnConv
from .paired_timing import interleaved, measured, random_input

MEASURE = True
MARGIN = 0.97        # the blocked region must take at most this share of the plain convs' time
BUDGET_S = 1.0       # timing one region stops here; a region not measured in full stays plain

_TIMES: dict[tuple, tuple[float, float]] = {}   # conv key -> (plain s, blocked s) per call


def region_pays(convs: list, conversions: int, channels_last: bool = False) -> bool:
    """Is ``convs`` (a region's ``(conv spec, traced input shape)`` pairs, the spec as ``_conv_spec`` gives it)
    faster blocked, with ``conversions`` layout conversions, than as torch's convs on plain tensors (channels-last
    ones with ``channels_last``)? (module docstring)"""
    if not MEASURE:
        return not channels_last
    deadline = time.perf_counter() + BUDGET_S
    plain = blocked = 0.0
    for spec, shape in convs:
        times = measured(_TIMES, _key(spec, shape) + (channels_last,),
                         lambda: _time_conv(spec, shape, channels_last), deadline)
        if times is None:
            return False
        plain, blocked = plain + times[0], blocked + times[1]
    if conversions:
        shape = tuple(convs[0][1])
        times = measured(_TIMES, ("conversions", shape), lambda: _time_conversion(shape), deadline)
        if times is None:
            return False
        blocked += conversions * times[1]
    return blocked <= MARGIN * plain


def _key(spec, shape) -> tuple:
    weight, bias, stride, padding, dilation, groups = spec
    return (tuple(weight.shape), bias is not None, str(stride), str(padding), str(dilation), groups, tuple(shape))


def _time_conv(spec, shape, channels_last: bool = False) -> tuple[float, float]:
    weight, bias, stride, padding, dilation, groups = spec
    x = random_input(shape)
    xb = ToBlocked()(x)
    kernel = BlockedConv(weight, bias, stride, padding, dilation, groups, example_shape=tuple(shape))
    if channels_last:   # what runs in a layout-free graph: conv_kernels.py's prepacked channels-last conv
        x = x.contiguous(memory_format=torch.channels_last)
        plain = OneDnnConv(weight, bias, stride, padding, dilation, groups, residual=False,
                           example_shape=tuple(shape))
        return interleaved(lambda: plain(x), lambda: kernel(xb))
    return interleaved(lambda: torch.conv2d(x, weight, bias, stride, padding, dilation, groups),
                       lambda: kernel(xb))


def _time_conversion(shape) -> tuple[float, float]:
    """(0, the mean of one ``to_mkldnn`` and one ``to_dense`` of a tensor of ``shape``)."""
    x = random_input(shape)
    xb = ToBlocked()(x)
    to_dense = ToDense()
    _, t_in = interleaved(lambda: None, lambda: ToBlocked()(x))
    _, t_out = interleaved(lambda: None, lambda: to_dense(xb))
    return 0.0, (t_in + t_out) / 2
