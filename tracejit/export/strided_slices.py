"""Every k-th element of the last axis as a row of a transposed matrix (static_shapes.py).

Rotary embeddings in timm's EVA (``rot``), GPT-J and RoFormer (``rotate_every_two``) split a head's features into
its even and odd elements, ``x[..., 0::2]`` and ``x[..., 1::2]``. torch_lib writes each as a ``Slice`` with
``steps = 2`` on the last axis, which onnxruntime (1.2x) copies one element at a time: 22 us for the 3,072
elements of one EVA02-tiny head slice at batch 1, 48 of them a call, about a tenth of the model's run time.

The same elements are a row of the last axis reshaped to ``(n / k, k)`` and transposed: ``x[..., s::k]`` equals
``Gather(Transpose(Reshape(x, (..., n / k, k))), s, axis=-2)`` when ``k`` divides the axis's size ``n`` and the
slice runs to its end. The reshape is a view, the transpose one blocked copy, each gather a contiguous copy;
slices of one tensor with one step share the transpose. onnxruntime's optimizer turns the gathers of a pair into
one ``Split`` of the reshape's last axis, which still copies a block per element pair: the rotation of one
EVA02-tiny head takes 25 us against 49 (onnxruntime 1.2x, one thread), and the whole model 0.91x its time. Only a
slice whose axis size (and rank) is known is rewritten, in the exported model (other axes may be dynamic: the
reshape keeps them with a 0) and in the model with its input sizes fixed; the same elements in the same order, so
the answer is bit for bit the same.

>>> import numpy as np
>>> x = np.arange(12).reshape(2, 6)
>>> x[..., 1::2].tolist()
[[1, 3, 5], [7, 9, 11]]
>>> x.reshape(2, 3, 2).swapaxes(-1, -2)[..., 1, :].tolist()     # row 1 of the transposed (3, 2) reshape
[[1, 3, 5], [7, 9, 11]]
"""
from __future__ import annotations

import numpy as np

from .reshape_chains import free_name
from .tidy import constant_array, replace_node


def deinterleave_strided_slices(graph) -> int:
    """Rewrite each ``Slice`` of ``graph`` (an onnx-ir Graph, changed in place) that takes every k-th element of
    its input's last axis from an offset below k to the end, where k > 1 divides the axis's known size, as a
    ``Gather`` of a transposed reshape (module docstring); returns how many."""
    import onnx_ir as ir   # optional dependency (the onnx extra)
    groups: dict[tuple[int, int], list] = {}
    for node in list(graph):
        found = _every_kth(node)
        if found is not None:
            groups.setdefault((id(node.inputs[0]), found[1]), []).append((node, found[0]))
    rewritten = 0
    for (_, step), slices in groups.items():
        source = slices[0][0].inputs[0]
        shape = [d if isinstance(d, int) else 0 for d in source.shape]   # 0: Reshape keeps the input's size
        rank, first = len(shape), slices[0][0]
        name = f"{first.name or 'slice'}_every_{step}"
        target = ir.Value(name=free_name(graph, f"{name}_shape"), const_value=ir.tensor(
            np.array(shape[:-1] + [shape[-1] // step, step], dtype=np.int64)))
        graph.register_initializer(target)
        reshape = ir.Node("", "Reshape", [source, target], num_outputs=1, name=f"{name}_rows")
        perm = list(range(rank - 1)) + [rank, rank - 1]
        transpose = ir.Node("", "Transpose", reshape.outputs, [ir.Attr("perm", ir.AttributeType.INTS, perm)],
                            num_outputs=1, name=f"{name}_columns")
        graph.insert_before(first, [reshape, transpose])
        for node, offset in slices:
            index = ir.Value(name=free_name(graph, f"{node.name or name}_offset"),
                             const_value=ir.tensor(np.array(offset, np.int64)))
            graph.register_initializer(index)
            gather = ir.Node("", "Gather", [transpose.outputs[0], index],
                             [ir.Attr("axis", ir.AttributeType.INT, rank - 1)], num_outputs=1,
                             name=f"{node.name or name}_row")
            replace_node(graph, node, gather)
            rewritten += 1
    return rewritten


def _every_kth(node) -> tuple[int, int] | None:
    """``(offset, k)`` where ``node`` is a Slice of every k-th element of its input's last axis of known size
    (k > 1 dividing it) from ``offset < k`` to the end, the input's rank known; else None."""
    if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 5:
        return None
    source = node.inputs[0]
    shape = source.shape if source is not None else None
    if shape is None or len(shape) == 0 or not isinstance(shape[-1], int):
        return None
    starts, ends, axes, steps = (constant_array(v) for v in node.inputs[1:])
    if any(a is None or a.size != 1 for a in (starts, ends, axes, steps)):
        return None
    rank, size = len(shape), shape[-1]
    step, start, end, axis = int(steps.item()), int(starts.item()), int(ends.item()), int(axes.item())
    if axis % rank != rank - 1 or step < 2 or size % step or not 0 <= start < step or end < size:
        return None
    return start, step
