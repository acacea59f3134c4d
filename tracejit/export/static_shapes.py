"""An exported model specialised to one set of input sizes: every dynamic axis fixed, the size math folded.

``export_onnx`` makes every input dimension a dynamic axis, so each size the program reads (a reshape to
``(batch, seq, heads, head_dim)``, an attention mask built from the sequence length) is an ONNX subgraph
``Shape -> Gather -> Squeeze -> Concat`` computed on every run, and a reshape's result has a shape no
optimizer can see through. onnxruntime folds such a subgraph only when the shape it reads is known, which
its own shape inference rarely establishes past the first computed reshape (GPT-2: 34 Shape, 36 Squeeze and
19 Concat nodes left in its optimized graph with the input sizes fixed, against none in torch.onnx's file,
whose sizes are constants). ``with_input_sizes`` fixes the axes and folds the model again with onnxscript's
constant folding, which propagates the sizes through each reshape (GPT-2: 372 -> 111 nodes, 78 after
onnxruntime's optimizer against torch.onnx's 75). The result is valid for those sizes only: the onnxruntime
backend runs it for calls of the traced shapes and the dynamic model for any other. Nodes no output reads
(BERT's pooler when the model returns the hidden states) are dropped from it: onnxruntime runs them otherwise;
a transformer's activations between its linears are computed as ``(tokens, features)`` matrices where that saves
the reshapes onnxruntime writes around each Gemm (token_rows.py), each chain of reshapes becomes one and a reshape to
its input's own shape none (reshape_chains.py), each ``ReduceSum / count`` one ``ReduceMean``
(reduce_means.py), each concat of concats along one axis one Concat (concat_chains.py), every k-th element of a last
axis a row of its transposed reshape (strided_slices.py), a linear split along its features one linear per piece
(split_matmuls.py), and an attention mask made of finite constants (T5's) needs
no hidden-row check (finite_masks.py).
"""
from __future__ import annotations

from ._deps import require
from .concat_chains import flatten_concats
from .finite_masks import drop_multiplications_by_one, fold_finite_mask_checks
from .reduce_means import restore_reduce_means
from .split_matmuls import split_matmul_outputs
from .strided_slices import deinterleave_strided_slices
from .reshape_chains import collapse_reshape_chains, drop_identity_reshapes, drop_needless_allowzero
from .tidy import fold_constants
from .token_rows import flatten_token_rows


def with_input_sizes(proto, sizes: dict[str, int]):
    """A copy of ``proto`` (an onnx ModelProto) with each input axis named in ``sizes`` fixed to its size and
    every subgraph those sizes decide folded into constants."""
    onnx, ir = require("onnx"), require("onnx_ir")
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    del fixed.graph.value_info[:]   # the symbolic shapes of intermediates: inferred again from the fixed sizes
    for value in fixed.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in sizes:
                size = sizes[dim.dim_param]
                dim.Clear()
                dim.dim_value = size
    for value in fixed.graph.output:
        for dim in value.type.tensor_type.shape.dim:
            dim.Clear()   # an unknown size: inferred again (an output axis may be named after an input axis)
    model = ir.serde.deserialize_model(fixed)
    fold_constants(model, drop_unread=True)   # nodes no output reads: onnxruntime would run them
    factors = fold_finite_mask_checks(model.graph)   # a mask of finite constants hides no row (finite_masks.py)
    if factors:
        fold_constants(model, drop_unread=True)   # its hidden-row factors are constants of ones now
        drop_multiplications_by_one(factors)
    flatten_token_rows(model.graph)   # a transformer's rows between its linears as matrices (token_rows.py)
    collapse_reshape_chains(model.graph)   # the sizes are known: a chain of reshapes is one (reshape_chains.py)
    drop_identity_reshapes(model.graph)   # and a reshape to the shape its input has is none
    drop_needless_allowzero(model.graph)   # a constant target without a 0: onnxruntime merges the reshape then
    flatten_concats(model.graph)   # a concat of concats along one axis is one (concat_chains.py)
    restore_reduce_means(model.graph)   # and no reduced axis is empty: a mean is one ReduceMean (reduce_means.py)
    split_matmul_outputs(model.graph)   # a linear split along its features: a linear per piece (split_matmuls.py)
    deinterleave_strided_slices(model.graph)   # every k-th element of the last axis: a transposed row (strided_slices.py)
    return ir.serde.serialize_model(model)
