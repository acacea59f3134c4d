"""Does a graph decide on values its weights compute? Then optimize_for_inference keeps eager's arithmetic.

Most inference passes change float rounding: a batch norm folded into its conv, channels-last convs, transposed
linear weights, oneDNN and numpy kernels. On a smooth output that is fp32 reassociation, a few ulps. On a
*decision* it is a coin toss that moves the answer by a whole step: which boxes clear a detector's score
threshold, where ``floor`` puts a RoI's bin, what ``int(box[2] - box[0] + 1)`` sizes a mask to. torchvision's
Mask R-CNN (random weights, the bench zoo's) came out of the full pipeline 8.2e-2 from eager at batch 1 and
5.5e-2 at batch 8 (torch.jit's freeze: 2.3e-2 and 6.9e-2; 40 copies of eager with every weight moved by one ulp:
0.6e-2 to 5.0e-2). With the passes that keep eager's arithmetic alone it is eager's answer to the bit, and as
fast (2.52 s at batch 8 against the full pipeline's 2.49 s and eager's 2.63 s).

``decision_on_computed_values(graph)`` finds the first node that decides on such a value: a value computed,
at any distance, by an op whose rounding a pass outside ``EXACT_PASSES`` may change (``SOURCES``: convs,
linears and matmuls, batch norms, kernels), read by

- an op that makes integers or booleans of it (a comparison, an argmax, a top-k's or a sort's indices, a cast
  to an integer dtype, ``int()``), an op whose result jumps at boundaries (``ops.steps``: floor, round, sign,
  remainder) or an op whose output size follows its values (``ops.has_data_dependent_shape``);
- a value guard (the trace read it as a Python number: ``if score > 0.5``).

Its size, rank, dtype and device (and a tensor made "like" it: ``ops.reads_metadata_only``,
``ops.reads_values_of``) do not depend on its rounding and carry nothing on. A comparison that only picks between branches meeting at the boundary (``where(h > 0, h, 0.1 * h)``, a leaky
relu written by hand) counts too: the rule cannot tell such a choice from a step, so that model keeps eager's
arithmetic and loses the passes' speed (none of the bench zoo's 67 other models has one). A graph with such a node
runs only ``EXACT_PASSES`` (passes/pipeline.py); any other pass, including one added
later, is left out of it (default-deny).

>>> import torch, tracejit
>>> w, x = torch.randn(4, 3, 3, 3), torch.randn(1, 3, 8, 8)
>>> scores = tracejit.trace(lambda x, w: torch.conv2d(x, w).amax(dim=(2, 3)), (x, w))
>>> decision_on_computed_values(scores.graph) is None      # a smooth output: every pass applies
True
>>> labels = tracejit.trace(lambda x, w: torch.conv2d(x, w).amax(dim=(2, 3)) > 0.5, (x, w))
>>> decision_on_computed_values(labels.graph).op              # a threshold on what the conv computed
'aten::gt.Scalar'
"""
from __future__ import annotations

from ..ir import GUARD, GUARD_KINDS, Graph, Node, TensorType, iter_values
from .. import ops
from ..ops.names import DEVICE_OF, DTYPE_OF, KERNEL, base_name

# the passes that keep eager's arithmetic to the bit: they drop, merge or precompute nodes, never reorder a sum
# (roi_align_kernels: only where the registered kernel gave the kernel's answer on a probe, passes/vision_kernels.py)
EXACT_PASSES = frozenset({"drop_identities", "fold_constants", "eliminate_common_subexpressions",
                          "dead_code_elimination", "roi_align_kernels"})
# the ops whose rounding the other passes change (fold_conv_batch_norm, conv_weights_channels_last,
# transpose_linear_weights, the oneDNN / numpy / cuDNN kernels): an implementation table of those passes
SOURCES = frozenset({"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d",
                     "conv_transpose2d", "conv_transpose3d", "linear", "matmul", "mm", "addmm", "bmm", "baddbmm",
                     "batch_norm", "native_batch_norm", "_native_batch_norm_legit_no_training"})
METADATA = (DTYPE_OF, DEVICE_OF)   # tracejit's own reads of a value's dtype / device
_FREE_GUARDS = frozenset(kind for kind, cost in GUARD_KINDS.items() if cost == "free")


def decision_on_computed_values(graph: Graph) -> Node | None:
    """The first node of ``graph`` that decides on a value a ``SOURCES`` op computed, or None (module docstring)."""
    computed: set[int] = set()
    for node in graph.nodes:
        reads = any(id(v) in computed for v in iter_values(ops.reads_values_of(node.op, node.args)))
        reads = reads or any(id(v) in computed for v in iter_values(tuple(node.kwargs.values())))
        if node.op == GUARD:
            if reads and node.attrs.get("kind") not in _FREE_GUARDS:
                return node
            continue
        if node.op in METADATA or ops.reads_metadata_only(node.op):
            continue
        if reads and (ops.steps(node.op) or ops.has_data_dependent_shape(node.op) or _gives_integers(node)):
            return node
        if reads or base_name(node.op) in SOURCES or node.op == KERNEL:
            computed.update(id(v) for v in node.outputs if v is not None)
    return None


def _gives_integers(node: Node) -> bool:
    """Does ``node`` make an integer or boolean tensor, or a Python int or bool?"""
    for v in node.outputs:
        t = getattr(v, "type", None)
        if isinstance(t, TensorType) and not (t.dtype.is_floating_point or t.dtype.is_complex):
            return True
        if t in (int, bool):
            return True
    return False
