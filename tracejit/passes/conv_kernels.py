"""Each constant-weight conv2d, with the ``add_`` and ``relu`` after it, becomes one oneDNN call.

A chain is ``c = conv2d(x, W, b, ...)`` with W (and b) frozen constants, then, when ``c`` has no
other reader, ``c.add_(r)`` (in place, so the sum has c's shape: a ResNet block's residual) or
``c + r`` / ``r + c`` (r traced with c's shape) and
then, when the result has no other reader, an activation oneDNN applies in the same call (relu,
silu, hardtanh / relu6, hardswish, ...: kernel_chains.activation_of; after a residual, relu only). Rank guards (``dim()`` reads, e.g.
batch norm's input check, left after it was folded into the conv) may read the chain's values;
they move after the fused node (passes/kernel_chains.py).

Each chain becomes a ``tracejit::kernel`` node calling a ``OneDnnConv`` (kernels/onednn_conv.py),
which reorders W into oneDNN's layout once and runs the fused op; calls that do not fit run the
recorded ops. The fused op returns channels-last tensors, which a graph conv_layout found layout-free
takes as they are. In a graph that reads strides (a detection head's ``view``), a conv (and its
activation; no residual) is fused only where it is a 1x1 conv that torch's conv2d would run without oneDNN,
on a map of at most ``SMALL_MAP`` positions (``_pays_with_nchw_result``), and the kernel returns torch's
NCHW result (``contiguous``): detection and segmentation heads on their smallest feature maps (bench/RESULTS.md,
"convs torch runs without oneDNN"). The kernel is an in-memory object (``IN_MEMORY_PASSES``): a saved program
keeps the graph before this pass.

Only where it pays (measured, one thread): oneDNN's fused call costs about 27 us whatever the size,
torch's dense conv2d 6-25 us below a million multiply-adds. So a dense conv (groups 1) is fused when
its traced call does at least ``MIN_DENSE_MACS`` multiply-adds (MobileNet-V3's squeeze-excite 1x1 convs
on 1x1 maps: 28 us fused, 6 us in torch; ResNet-18's 3x3 convs at 4.7M-9.4M: 110-540 us fused, 110-1400
in torch); a grouped or depthwise conv always (torch's grouped conv2d took 36-60 us where oneDNN took
30-40 at every size measured). A size the trace did not fix counts as 1 (default-deny).
"""
from __future__ import annotations

import torch

from ..ir import Graph, Node, TensorType, Value
from ..ops.convs import CONV2D as CONVS
from ..kernels.onednn_conv import OneDnnConv, available
from .conv_layout import layout_free
from .graph_copy import copy_graph
from .lowered import Lowered
from .kernel_chains import (activation_after, constant_f32, finish, int_or_pair, kernel_nodes, readers_of,
                            replace_chain, sole_reader, write_order, writes_between)

ADD_INPLACE = "aten::add_.Tensor"
ADD = "aten::add.Tensor"
_DEFAULTS = (None, 1, 0, 1, 1)   # conv2d's bias, stride, padding, dilation, groups
MIN_DENSE_MACS = 4_000_000       # a dense conv below this many multiply-adds per call stays torch's conv2d
SMALL_MAP = 16                   # in a graph that reads strides, a 1x1 conv is fused only on a map this small


def fuse_conv_kernels(lowered: Lowered) -> Lowered:
    """A lowering pass: a copy of ``lowered``'s graph where each constant-weight conv2d chain is one fused
    kernel node, its kernel appended to the lowered program's table (passes/lowered.py)."""
    out, kernels = copy_graph(lowered.graph), list(lowered.kernels)
    if not available() or not any(n.op in CONVS for n in out.nodes):
        return Lowered(out, lowered.kernels)
    free = layout_free(out)   # else each kernel gives torch's NCHW result, where torch's own conv is slow
    readers, order = readers_of(out), write_order(out)
    changed = False
    for conv in [n for n in out.nodes if n.op in CONVS]:
        spec = _conv_spec(out, conv)
        if spec is None or not _pays(spec, conv.args[0].type.shape) or (
                not free and not _pays_with_nchw_result(spec, conv.args[0].type.shape)):
            continue
        chain, residual = [conv], None
        add = sole_reader(conv.outputs[0], readers) if free else None
        other = _residual(add, conv.outputs[0]) if add is not None else None
        if other is not None and not writes_between(order, conv, add):
            chain.append(add)
            residual = other
        activation = ("none", ())
        found = activation_after(chain[-1], readers, order)
        if found is not None and (residual is None or found[1][0] == "relu"):   # oneDNN: add, then relu only
            chain.append(found[0])
            activation = found[1]
        kernel = OneDnnConv(*spec, residual=residual is not None, activation=activation[0], scalars=activation[1],
                            example_shape=conv.args[0].type.shape, inplace_add=chain[1].op == ADD_INPLACE
                            if residual is not None else True, contiguous=not free)
        if kernel._packed is None:   # the constants do not fit oneDNN's op: keep torch's
            continue
        inputs = (conv.args[0],) if residual is None else (conv.args[0], residual)
        replace_chain(out, kernels, chain, kernel, inputs, "onednn:" + kernel.describe(), readers)
        changed = True
    return Lowered(finish(out, changed), tuple(kernels))


def multiply_adds(weight, stride, padding, dilation, shape) -> int:
    """Multiply-adds of one conv2d call on an input of ``shape`` (a size that is not an int counts as 1)."""
    n, _, h, w = (s if isinstance(s, int) and s > 0 else 1 for s in shape)
    out = []
    for size, k, st, p, d in zip((h, w), weight.shape[2:], *(_pair(a) for a in (stride, padding, dilation))):
        out.append(max((size + 2 * p - d * (k - 1) - 1) // st + 1, 1))
    return weight.numel() * n * out[0] * out[1]


def _pays(spec, shape) -> bool:
    """Is oneDNN's fused call measured faster than torch's conv2d for this conv at its traced size?"""
    weight, _, stride, padding, dilation, groups = spec
    return groups > 1 or multiply_adds(weight, stride, padding, dilation, shape) >= MIN_DENSE_MACS


def _pays_with_nchw_result(spec, shape) -> bool:
    """Is this a 1x1 unstrided conv under batch 16 on a map of at most ``SMALL_MAP`` positions? torch's conv2d
    runs it without oneDNN at one thread (ATen's ``use_mkldnn``, Convolution.cpp), and there oneDNN's call with
    the weight packed once, NCHW result included, ran 5-7x faster as close to float64 (a 1x1 conv of 2048 -> 256
    channels on a 3x3 map: 938-2105 -> 139-336 us; RetinaNet b1 0.96 -> 0.90x eager, its answer as far from
    eager's as jit freeze's). Not fused: a 1x1 conv on a larger map (one product in torch too: FCN-ResNet50's
    ran ~5% faster fused and 1.1e-5 -> 2.0e-5 off eager, above jit freeze's 1.3e-5), and 3x3 convs on small maps,
    which oneDNN ran 2-15x faster but further from float64 (RetinaNet b1 0.74x eager, 1.9e-4 off eager against
    jit freeze's 1.2e-4; Inception-v3's answer 2.3x jit freeze's distance: tests/models/test_zoo_architectures)."""
    weight, _, stride, padding, dilation, groups = spec
    n, c, h, w = (s if isinstance(s, int) and s > 0 else None for s in shape)
    if None in (n, c, h, w) or groups > 1 or tuple(weight.shape[2:]) != (1, 1) or n >= 16:
        return False
    plain = all(v == 1 for v in _pair(stride)) and all(v == 1 for v in _pair(dilation)) and \
        all(v == 0 for v in _pair(padding))
    return plain and h * w <= SMALL_MAP


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _residual(add: Node, c: Value):
    """The other operand when ``add`` adds it to the conv result ``c``: ``c.add_(r)`` (the sum has c's
    shape), or ``c + r`` / ``r + c`` when r was traced with c's shape (a different shape at a call
    runs torch's add); else None. No alpha, no keywords."""
    if add.op not in (ADD_INPLACE, ADD) or len(add.args) != 2 or add.kwargs:
        return None
    a, b = add.args
    other = b if a is c else (a if add.op == ADD and b is c else None)
    if other is None or other is c or not _f32_4d(other):
        return None
    if add.op == ADD and tuple(other.type.shape) != tuple(c.type.shape):
        return None
    return other


def _conv_spec(graph: Graph, conv: Node):
    """(weight, bias, stride, padding, dilation, groups) of a conv2d the kernel can run, else None."""
    if conv.kwargs or not 2 <= len(conv.args) <= 7 or not _f32_4d(conv.args[0]):
        return None
    args = list(conv.args) + list(_DEFAULTS[len(conv.args) - 2:])
    weight, bias = constant_f32(graph, args[1]), None
    if weight is None or weight.dim() != 4:
        return None
    if args[2] is not None:
        bias = constant_f32(graph, args[2])
        if bias is None or bias.dim() != 1:
            return None
    if isinstance(args[4], str):
        args[4] = _explicit_padding(args[4], weight, args[5])
    if not all(int_or_pair(a) for a in args[3:6]) or not isinstance(args[6], int) or isinstance(args[6], bool):
        return None
    return weight, bias, args[3], args[4], args[5], args[6]


def _explicit_padding(mode: str, weight, dilation):
    """conv2d's "valid" / "same" as the symmetric padding oneDNN takes, or None ("same" with an even
    extent pads one side more: torch's conv2d runs it)."""
    if mode == "valid":
        return (0, 0)
    if mode != "same" or not int_or_pair(dilation):
        return None
    dilation = (dilation, dilation) if isinstance(dilation, int) else dilation
    total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
    return tuple(t // 2 for t in total) if all(t % 2 == 0 for t in total) else None


def _f32_4d(v) -> bool:
    t = getattr(v, "type", None) if isinstance(v, Value) else None
    return isinstance(t, TensorType) and t.dtype == torch.float32 and t.device == "cpu" and len(t.shape) == 4


def conv_kernel_nodes(graph: Graph) -> list:
    """The fused convolution nodes of ``graph`` (for tests and tools)."""
    return kernel_nodes(graph, "onednn:conv2d")
