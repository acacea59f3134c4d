"""A transformer's activations as rows, ``(tokens, features)``, between its linear layers, in a model whose sizes
are all known (static_shapes.py).

A linear layer on a ``(batch, seq, features)`` activation is exported as ``MatMul`` + ``Add`` (the bias);
onnxruntime fuses the pair into one ``Gemm``, which takes matrices only, so it writes a ``Reshape`` to
``(batch * seq, features)`` before each and one back after: BERT's two layers ran 34 Reshape kernels for 12
linears (so does torch.onnx's file), about 0.2 us each on one thread, a tenth of a call at batch 1.
Everything between two linears of a transformer layer works on rows alone: the bias and residual adds, the
activations, the layer norms over the last axis. ``flatten_token_rows`` finds each connected region of such
row-wise nodes and, where that saves kernels, computes the region on the ``(tokens, features)`` matrices:
a Reshape where a value enters the region (none where it comes out of a reshape, which reshapes to the matrix
instead), one where a value leaves it for another kind of node (none into a reshape: reshapes merge), and no
Reshape pair around its linears. Only row-major re-reads are added or removed: with onnxruntime's optimizer off
every kernel computes the same elements in the same order, bit for bit (tests/export/test_token_rows.py). With it
on, the fusions it picks can differ: it fuses a residual add and its layer norm into ``SkipLayerNormalization`` on
3-D activations only, so BERT runs them as two kernels (7e-7 on outputs of scale ~4; as far from eager as before).

A region is rewritten when the Gemm reshape pairs it removes (two per linear with a bias) outnumber the
Reshapes its boundary adds; a graph without linears on rank-3+ activations is left as it is.
"""
from __future__ import annotations

import math

import numpy as np

from ._deps import require
from .reshape_chains import RESHAPES, free_name
from .tidy import constant_array

# row-wise ONNX ops: each output row is computed from the same row of the inputs, so the op computes the same
# on the (tokens, features) matrix as on the (batch, seq, features) tensor
UNARY_ROW_OPS = ("Erf", "Tanh", "Relu", "Sigmoid", "Neg", "Sqrt", "Reciprocal", "Exp", "Log", "Abs", "Cast",
                 "Identity", "Softplus", "Gelu", "LeakyRelu", "Elu", "HardSigmoid", "HardSwish", "Sin", "Cos")
BINARY_ROW_OPS = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min")
REDUCE_ROW_OPS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin")   # over the features, kept: a (..., 1) row


def flatten_token_rows(graph) -> int:
    """Compute each profitable row-wise region of ``graph`` (an onnx-ir Graph, changed in place) on
    ``(tokens, features)`` matrices (module docstring); returns how many regions were rewritten."""
    ir = require("onnx_ir")
    rows = {id(n): n for n in graph if _row_positions(n) is not None}
    rewritten, taken = 0, None
    for region in _regions(rows):
        if _saved(region) > _boundary_cost(region):
            taken = _value_names(graph) if taken is None else taken
            _rewrite(graph, region, ir, taken)
            rewritten += 1
    return rewritten


def _static_rows(value) -> tuple | None:
    """The static shape of ``value`` when it is a tensor of rank 3 or more with known, non-zero sizes; else None."""
    shape = value.shape if value is not None else None
    if shape is None or len(shape) < 3 or not shape.is_static():
        return None
    dims = tuple(int(d) for d in shape)
    return dims if all(d > 0 for d in dims) else None


def _row_positions(node) -> list[int] | None:
    """The input positions of ``node`` that carry full ``(..., features)`` rows, when ``node`` is row-wise (its
    other inputs are constants it reads the same for every row); else None. Its one output is a row value too."""
    if node.domain not in ("", "ai.onnx") or len(node.outputs) < 1 or not node.inputs:
        return None
    out = _static_rows(node.outputs[0])
    if out is None or any(v.uses() or v.is_graph_output() for v in node.outputs[1:]):
        return None
    op = node.op_type
    if op == "MatMul":
        weight = constant_array(node.inputs[1])
        return [0] if weight is not None and weight.ndim == 2 and _static_rows(node.inputs[0]) else None
    if op in UNARY_ROW_OPS:
        return [0] if len(node.inputs) == 1 and _static_rows(node.inputs[0]) == out else None
    if op == "LayerNormalization":
        axis = node.attributes.get_int("axis", -1)
        params = [constant_array(v) for v in node.inputs[1:]]
        if axis not in (-1, len(out) - 1) or _static_rows(node.inputs[0]) != out:
            return None
        return [0] if all(p is not None and p.ndim == 1 for p in params) else None
    if op in BINARY_ROW_OPS and len(node.inputs) == 2:
        positions = []
        for i, value in enumerate(node.inputs):
            const = constant_array(value)
            if const is None and _same_rows(_static_rows(value), out):
                positions.append(i)
            elif not _per_feature(const, out):
                return None
        return positions or None
    if op in REDUCE_ROW_OPS:
        dims = _static_rows(node.inputs[0])
        return [0] if dims is not None and out == dims[:-1] + (1,) and _over_features(node, len(dims)) else None
    return None


def _same_rows(dims, out: tuple) -> bool:
    """Does a row value of shape ``dims`` hold the same rows as ``out`` (its features, or one value per row: an
    RMSNorm's ``mean(x^2)``, broadcast over the features)?"""
    return dims is not None and len(dims) == len(out) and dims[:-1] == out[:-1] and dims[-1] in (out[-1], 1)


def _over_features(node, rank: int) -> bool:
    """Does the reduction ``node`` reduce the last axis alone, keeping it (``(..., 1)``)?"""
    if not node.attributes.get_int("keepdims", 1) or node.attributes.get_int("noop_with_empty_axes", 0):
        return False
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = constant_array(node.inputs[1])
        axes = None if axes is None else [int(a) for a in axes.reshape(-1)]
    else:
        axes = node.attributes.get_ints("axes", None)
        axes = None if axes is None else list(axes)
    return axes in ([-1], [rank - 1])


def _per_feature(array, out: tuple) -> bool:
    """Is ``array`` a constant every row reads the same way (a scalar, a vector over the features, or one of the
    full shape: a position table folded at the traced size)?"""
    if array is None:
        return False
    if array.shape == out:
        return True
    lead = array.shape[:-1] if array.ndim else ()
    return array.ndim <= len(out) and all(d == 1 for d in lead) and (array.ndim == 0 or array.shape[-1] in (1, out[-1]))


def _regions(rows: dict) -> list[list]:
    """The connected sets of row-wise nodes, linked by the row values they pass each other or read together, in
    graph order."""
    parent: dict = {}

    def find(key):
        parent.setdefault(key, key)
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for node in rows.values():
        for i in _row_positions(node):
            value = node.inputs[i]
            parent[find(("node", id(node)))] = find(("value", id(value)))
            producer = value.producer()
            if producer is not None and id(producer) in rows:
                parent[find(("node", id(producer)))] = find(("value", id(value)))
    groups: dict = {}
    for k, node in rows.items():
        groups.setdefault(find(("node", k)), []).append(node)
    return list(groups.values())


def _uses(value):
    for use in value.uses():
        yield (use.node, use.idx) if hasattr(use, "node") else (use[0], use[1])


def _saved(region) -> int:
    """The Reshape kernels the rewrite saves: the two onnxruntime's Gemm fusion would add around each linear with
    a bias (a MatMul whose one use is an Add of the region), and each reshape between the region and a matrix
    (GPT-2's linears are ``view(-1, features)`` + ``addmm``: such a reshape becomes the identity, dropped)."""
    members = {id(n) for n in region}
    saved = 0
    for node in region:
        if node.op_type == "MatMul":
            uses = list(_uses(node.outputs[0]))
            if len(uses) == 1 and id(uses[0][0]) in members and uses[0][0].op_type == "Add":
                saved += 2
        outside = _outside_uses(node.outputs[0], members)
        if (len(outside) == 1 and outside[0][0].op_type in RESHAPES and not node.outputs[0].is_graph_output()
                and _static_shape(outside[0][0].outputs[0]) == _matrix(_static_rows(node.outputs[0]))):
            saved += 1
    for value in _entering(region).values():
        source = value.producer().inputs[0] if _absorbed(value, members) else None
        if source is not None and _static_shape(source) == _matrix(_static_rows(value)):
            saved += 1
    return saved


def _static_shape(value) -> tuple | None:
    shape = value.shape if value is not None else None
    return tuple(int(d) for d in shape) if shape is not None and shape.is_static() else None


def _matrix(dims: tuple) -> tuple:
    """``(tokens, features)`` of a row value's shape."""
    return (math.prod(dims[:-1]), dims[-1])


def _entering(region) -> dict:
    """id -> value for each row value the region reads but does not compute."""
    members = {id(n) for n in region}
    entering = {}
    for node in region:
        for i in _row_positions(node):
            value = node.inputs[i]
            producer = value.producer()
            if producer is None or id(producer) not in members:
                entering[id(value)] = value
    return entering


def _absorbed(value, members) -> bool:
    """Does ``value`` enter the region from a reshape only the region reads (which can reshape to the matrix)?"""
    producer = value.producer()
    return (producer is not None and producer.op_type in RESHAPES and producer.domain in ("", "ai.onnx")
            and not value.is_graph_output() and all(id(n) in members for n, _ in _uses(value)))


def _outside_uses(value, members) -> list:
    return [(n, i) for n, i in _uses(value) if id(n) not in members or i not in _row_positions(n)]


def _boundary_cost(region) -> int:
    """The Reshapes the rewritten region adds: one per entering value not absorbed, one per computed value read
    elsewhere than by one reshape (a chain of reshapes merges: reshape_chains.py)."""
    members = {id(n) for n in region}
    cost = sum(not _absorbed(v, members) for v in _entering(region).values())
    for node in region:
        value = node.outputs[0]
        outside = _outside_uses(value, members)
        if value.is_graph_output() or len(outside) > 1 or (outside and outside[0][0].op_type not in RESHAPES):
            cost += 1
    return cost


def _value_names(graph) -> set:
    """Every value name of ``graph`` (inputs, initializers, node outputs): the rewrite's new names avoid them all."""
    names = {v.name for v in graph.inputs} | set(graph.initializers)
    names.update(o.name for node in graph for o in node.outputs)
    return names


def _fresh(taken: set, name: str) -> str:
    """``name``, or ``name_<k>`` where ``taken`` holds it (a value read both as a row and as a constant operand got
    ``<name>_rows`` twice: a Reshape's output and an initializer, and onnxruntime refused the model, "Duplicate
    definition of name": transformers' Perceiver, breadth27); the name is taken from then on."""
    free, k = name, 1
    while free in taken:
        free, k = f"{name}_{k}", k + 1
    taken.add(free)
    return free


def _rewrite(graph, region, ir, taken: set) -> None:
    flat_of: dict = {}   # id(original value) -> its (tokens, features) value
    backs = []   # the Reshapes back to each computed value's shape (dropped below where only members read it)

    def shape_const(dims, name):
        value = ir.Value(name=_fresh(taken, free_name(graph, name)), shape=ir.Shape([len(dims)]),
                         type=ir.TensorType(ir.DataType.INT64),
                         const_value=ir.tensor(np.array(dims, dtype=np.int64)))
        graph.register_initializer(value)
        return value

    for value in _entering(region).values():
        dims = _static_rows(value)
        target = shape_const(_matrix(dims), f"{value.name}_rows_shape")
        producer = value.producer()
        node = ir.Node("", "Reshape", [value, target], num_outputs=1, name=f"{value.name}_to_rows")
        if producer is None:   # a graph input: before the region's first node, which comes before its readers
            graph.insert_before(region[0], node)
        else:
            graph.insert_after(producer, node)
        node.outputs[0].shape, node.outputs[0].type = ir.Shape(list(_matrix(dims))), value.type
        node.outputs[0].name = _fresh(taken, f"{value.name}_rows")
        flat_of[id(value)] = node.outputs[0]
    for node in region:   # graph order: each row input is entering or computed by an earlier member
        positions = _row_positions(node)
        inputs = []
        out_dims = _static_rows(node.outputs[0])
        for i, value in enumerate(node.inputs):
            if i in positions:
                inputs.append(flat_of[id(value)])
            elif node.op_type in BINARY_ROW_OPS:
                inputs.append(_flat_constant(graph, value, out_dims, node, ir, taken))
            elif node.op_type in REDUCE_ROW_OPS:   # the axes: the matrix's last
                inputs.append(shape_const((-1,), f"{node.outputs[0].name}_rows_axes"))
            else:   # a MatMul's weight, a layer norm's scale and bias: as they are
                inputs.append(value)
        attrs = [ir.Attr(a.name, a.type, a.value) for a in node.attributes.values()]
        if node.op_type == "LayerNormalization":   # over the last axis, which is axis 1 of the matrix
            attrs = [a for a in attrs if a.name != "axis"] + [ir.Attr("axis", ir.AttributeType.INT, -1)]
        if node.op_type in REDUCE_ROW_OPS and "axes" in node.attributes:   # before opset 18: an attribute
            attrs = [a for a in attrs if a.name != "axes"] + [ir.Attr("axes", ir.AttributeType.INTS, [-1])]
        flat = ir.Node("", node.op_type, inputs, attrs, num_outputs=1, name=f"{node.outputs[0].name}_rows")
        graph.insert_before(node, flat)
        old = node.outputs[0]
        flat.outputs[0].shape, flat.outputs[0].type = ir.Shape(list(_matrix(out_dims))), old.type
        flat.outputs[0].name = _fresh(taken, f"{old.name}_rows")
        flat_of[id(old)] = flat.outputs[0]
        back = ir.Node("", "Reshape", [flat.outputs[0], shape_const(out_dims, f"{old.name}_shape")], num_outputs=1,
                       name=f"{old.name}_from_rows")
        graph.insert_after(flat, back)
        backs.append(back)
        back.outputs[0].shape, back.outputs[0].type = old.shape, old.type
        name = old.name
        old.replace_all_uses_with(back.outputs[0], replace_graph_outputs=True)
        flat_of[id(back.outputs[0])] = flat.outputs[0]   # the later members read it through the Reshape back
        graph.remove(node, safe=True)
        back.outputs[0].name = name
    for back in backs:   # the Reshapes back that only members read: dropped
        if not back.outputs[0].uses() and not back.outputs[0].is_graph_output():
            graph.remove(back, safe=True)


def _flat_constant(graph, value, out_dims, node, ir, taken: set):
    """A per-feature constant operand as the matrices read it: a full-shape one (a position table) reshaped to the
    matrix, a ``(1, 1, features)`` one to ``(features,)``; a scalar or a vector as it is."""
    array = constant_array(value)
    if array is None or array.ndim <= 1:
        return value
    if array.shape == tuple(out_dims):
        flat = array.reshape(math.prod(out_dims[:-1]), out_dims[-1])
    else:
        flat = array.reshape(array.shape[-1:])
    const = ir.Value(name=_fresh(taken, free_name(graph, f"{value.name}_rows")), shape=ir.Shape(list(flat.shape)),
                     type=value.type,
                     const_value=ir.tensor(np.ascontiguousarray(flat)))
    graph.register_initializer(const)
    return const
