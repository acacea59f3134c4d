"""On CUDA, each constant-weight conv2d followed by relu (with a residual add between them or not) becomes one
cuDNN call (kernels/cudnn_conv.py): a lowering pass of ``CUDA_IN_MEMORY_PASSES``, for programs whose tensors are
all on one CUDA device (passes/pipeline.py).

A chain is ``c = conv2d(x, W, b, ...)`` with W (and b) frozen CUDA constants of a float dtype, x a 4-d tensor of
that dtype traced on that device; then, when ``c`` has no other reader, ``c.add_(r)`` or ``c + r`` / ``r + c``
(r traced with c's shape, dtype and device); then, when the result has no other reader, ``relu`` / ``relu_``,
with no write in place between them. A conv with no relu after it stays torch's (one call either way). Nothing
is fused where the device's fused relu does not keep a NaN as ``torch.relu`` does (``fusion_keeps_nan``, asked
once per device). The kernel is an in-memory object: a saved program keeps the graph before this pass.

The example runs on any machine: without CUDA nothing is fused. Whether the build keeps the pass is timed on the
whole program (backends/cuda_pass_choice.py).

>>> import torch, tracejit
>>> device = "cuda" if torch.cuda.is_available() else "cpu"
>>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval().to(device)
>>> optimized = tracejit.optimize_for_inference(tracejit.trace(net, (torch.randn(1, 3, 8, 8, device=device),)))
>>> lowered = fuse_cudnn_convs(Lowered(optimized.forward.graph))   # the pass alone (the build keeps it where it pays)
>>> len(cudnn_conv_nodes(lowered.graph)) == (1 if torch.cuda.is_available() else 0)
True
"""
from __future__ import annotations

from ..ir import Graph, Node, TensorType, Value
from ..kernels.cudnn_conv import DTYPES, CudnnConvRelu, fusion_keeps_nan
from ..ops.convs import CONV2D as CONVS
from .graph_copy import copy_graph
from .kernel_chains import (activation_after, finish, frozen_constant, int_or_pair, kernel_nodes, readers_of,
                            replace_chain, sole_reader, write_order, writes_between)
from .lowered import Lowered

ADD_INPLACE = "aten::add_.Tensor"
ADD = "aten::add.Tensor"
DEVICE_TYPE = "cuda"   # (tests/passes/test_cuda_conv_kernels.py sets "meta" to prove the chains on a CPU machine)
_DEFAULTS = (None, 1, 0, 1, 1)   # conv2d's bias, stride, padding, dilation, groups


def fuse_cudnn_convs(lowered: Lowered) -> Lowered:
    """A lowering pass: a copy of ``lowered``'s graph where each conv2d [+ add] + relu chain on CUDA is one
    kernel node, its kernel appended to the lowered program's table (passes/lowered.py)."""
    out, kernels = copy_graph(lowered.graph), list(lowered.kernels)
    convs = [n for n in out.nodes if n.op in CONVS]
    if not convs:
        return Lowered(out, lowered.kernels)
    readers, order = readers_of(out), write_order(out)
    changed = False
    for conv in convs:
        spec = _conv_spec(out, conv)
        if spec is None or not fusion_keeps_nan(str(spec[0].device)):
            continue
        chain, residual = [conv], None
        add = sole_reader(conv.outputs[0], readers)
        other = _residual(add, conv.outputs[0]) if add is not None else None
        if other is not None and not writes_between(order, conv, add):
            chain.append(add)
            residual = other
        found = activation_after(chain[-1], readers, order)
        if found is None or found[1] != ("relu", ()):
            continue   # no relu after it: torch's conv2d (and add) is one call too
        chain.append(found[0])
        kernel = CudnnConvRelu(*spec, residual=residual is not None,
                               inplace_add=chain[1].op == ADD_INPLACE if residual is not None else True)
        inputs = (conv.args[0],) if residual is None else (conv.args[0], residual)
        replace_chain(out, kernels, chain, kernel, inputs, "cudnn:" + kernel.describe(), readers)
        changed = True
    return Lowered(finish(out, changed), tuple(kernels))


def _cuda_4d(v, dtype=None, device=None) -> bool:
    t = getattr(v, "type", None) if isinstance(v, Value) else None
    return isinstance(t, TensorType) and t.device.split(":")[0] == DEVICE_TYPE and len(t.shape) == 4 and \
        t.dtype in DTYPES and (dtype is None or t.dtype == dtype) and (device is None or t.device == device)


def _constant(graph: Graph, v):
    """The frozen CUDA tensor ``v`` reads (a constant node), or None."""
    return frozen_constant(graph, v, DEVICE_TYPE, DTYPES)


def _conv_spec(graph: Graph, conv: Node):
    """(weight, bias, stride, padding, dilation, groups) of a conv2d the kernel can run, else None."""
    if conv.kwargs or not 2 <= len(conv.args) <= 7:
        return None
    args = list(conv.args) + list(_DEFAULTS[len(conv.args) - 2:])
    weight = _constant(graph, args[1])
    if weight is None or weight.dim() != 4 or not _cuda_4d(args[0], weight.dtype, str(weight.device)):
        return None
    bias = None
    if args[2] is not None:
        bias = _constant(graph, args[2])
        if bias is None or bias.dim() != 1 or bias.dtype != weight.dtype or bias.device != weight.device:
            return None
    if not all(int_or_pair(a) for a in args[3:6]) or not isinstance(args[6], int) or isinstance(args[6], bool):
        return None   # ("same" / "valid" padding strings: torch's conv2d)
    return weight, bias, args[3], args[4], args[5], args[6]


def _residual(add: Node, c: Value):
    """The other operand when ``add`` adds it to the conv result ``c`` with c's traced shape, dtype and device
    (``c.add_(r)``, ``c + r``, ``r + c``; no alpha, no keywords), else None."""
    if add.op not in (ADD_INPLACE, ADD) or len(add.args) != 2 or add.kwargs:
        return None
    a, b = add.args
    other = b if a is c else (a if add.op == ADD and b is c else None)
    if other is None or other is c or not _cuda_4d(other, c.type.dtype, c.type.device):
        return None
    return other if tuple(other.type.shape) == tuple(c.type.shape) else None


def cudnn_conv_nodes(graph: Graph) -> list:
    """The fused cuDNN convolution nodes of ``graph`` (for tests and tools)."""
    return kernel_nodes(graph, "cudnn:conv2d")
