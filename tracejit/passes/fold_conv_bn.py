"""Conv + batch-norm folding: ``batch_norm(conv(x, W, b))`` in inference mode becomes one conv.

With s = gamma * rsqrt(running_var + eps): W' = W * s (per output channel) and
b' = (b - running_mean) * s + beta, computed as torch.jit's freeze folds them (``folded``: the same
operations in the tensors' own dtype, so the folded constants are torch.jit's to the bit). Applies when the
conv's weight and bias and all batch-norm tensors are constants (run ``freeze`` first), the conv result
is used only by the batch norm and every scale s is finite (a zero ``running_var + eps`` stays a batch
norm).
"""
from __future__ import annotations

import torch

from ..ir import Graph, Node, TensorType, Value, verify
from ..ops.convs import CONV_ND as CONVS
from .dce import eliminate_dead_code
from .graph_copy import copy_graph, replace_uses

BATCH_NORM = "aten::batch_norm.default"
SHAPE_GUARDS = ("rank", "size", "length")


def fold_conv_batch_norm(graph: Graph) -> Graph:
    out = copy_graph(graph)
    uses: dict[int, int] = {}
    for node in out.nodes:
        if node.op == "tracejit::guard" and node.attrs.get("kind") in SHAPE_GUARDS:
            continue   # folding keeps the conv result's shape: its rank / size guards still hold
        for v in node.input_values():
            uses[id(v)] = uses.get(id(v), 0) + 1
    for leaf in out.outputs:
        if isinstance(leaf, Value):
            uses[id(leaf)] = uses.get(id(leaf), 0) + 1
    mapping: dict = {}
    dropped: set[int] = set()
    for bn in out.nodes:
        if bn.op != BATCH_NORM or bn.kwargs or len(bn.args) < 8:
            continue
        x, gamma, beta, mean, var, training, _momentum, eps = bn.args[:8]
        conv = x.producer if isinstance(x, Value) else None
        if training or conv is None or conv.op not in CONVS or uses.get(id(x), 0) != 1 or conv.kwargs:
            continue
        tensors = [_const(out, t) for t in (conv.args[1], gamma, beta, mean, var)]
        bias = conv.args[2] if len(conv.args) > 2 else None
        bias_t = None if bias is None else _const(out, bias)
        if any(t is None for t in tensors) or (bias is not None and bias_t is None):
            continue
        if any(t.device.type == "meta" for t in tensors + [bias_t] if t is not None):
            continue   # a meta tensor holds no values: the scale cannot be proved finite
        weight, gamma_t, beta_t, mean_t, var_t = tensors
        new_w, new_b = folded(weight, bias_t, gamma_t, beta_t, mean_t, var_t, eps)
        if new_w is None:
            continue   # var + eps == 0: eager's (x - mean) * inf is +-inf or nan per element, not W * inf summed
        w_val = _add_constant(out, new_w, conv)
        b_val = _add_constant(out, new_b, conv)
        args = list(conv.args)
        args[1] = w_val
        if len(args) > 2:
            args[2] = b_val
        else:
            args.append(b_val)
        conv.args = tuple(args)
        mapping[id(bn.outputs[0])] = conv.outputs[0]
        dropped.add(id(bn))
    if not dropped:
        return out
    pending = [n for n in out.nodes if n.attrs.get("_new_const")]
    nodes = []
    for node in out.nodes:
        if id(node) in dropped or node.attrs.get("_new_const"):
            continue
        if node.op in CONVS:
            nodes.extend(p for p in pending if p.attrs["_for"] is node)
        nodes.append(node)
    for p in pending:
        del p.attrs["_new_const"], p.attrs["_for"]
    out.nodes = nodes
    replace_uses(out, mapping)
    eliminate_dead_code(out)
    verify(out)
    return out


def folded(weight, bias, gamma, beta, mean, var, eps):
    """The folded conv weight and bias as torch.jit's freeze computes them (FoldFrozenConvBatchnorm:
    ``rsqrt(var + eps)``, ``W * (gamma * rsqrt)``, ``(b - mean) * rsqrt * gamma + beta``, in the tensors' own
    dtype, cast to the weight's and the bias's), or (None, None) when a scale is not finite.

    Why not a wider fold: eager's batch norm scales the conv's result by its float32 ``gamma / sqrt(var + eps)``;
    a fold that multiplies the weights by that same float32 scale leaves only each weight's rounding between the
    folded conv and eager's, where a float64 fold adds the scale's own rounding on every channel. On random
    conv + batch-norm layers this fold is nearer eager on every one of 40 (3x3 and 1x1), the float64 fold nearer
    float64 (bench/RESULTS.md, "#25, thirtieth pass"); the issue's rule is the distance to eager. And where the
    folded conv runs oneDNN's kernel as torch.jit's does, the result is torch.jit's to the bit."""
    rsqrt = torch.rsqrt(var + eps)
    scale = gamma * rsqrt
    if not torch.isfinite(scale).all():
        return None, None
    new_w = (weight * scale.reshape(-1, *([1] * (weight.dim() - 1)))).to(weight.dtype)
    b = bias if bias is not None else torch.zeros(weight.shape[0], dtype=mean.dtype, device=mean.device)
    new_b = ((b - mean) * rsqrt * gamma + beta).to(bias.dtype if bias is not None else weight.dtype)
    return new_w, new_b


def _const(graph: Graph, v):
    if isinstance(v, Value) and v.producer is not None and v.producer.op == "tracejit::constant":
        return graph.constants[v.producer.attrs["index"]]
    return None


def _add_constant(graph: Graph, tensor: torch.Tensor, conv: Node) -> Value:
    node = Node("tracejit::constant", "", attrs={"index": len(graph.constants), "_new_const": True, "_for": conv},
                source=conv.source, scope=conv.scope)
    graph.constants.append(tensor.contiguous())
    graph.add_node(node, [TensorType.of(tensor)])
    return node.outputs[0]
