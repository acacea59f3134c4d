"""A transformer's activations between its linears as ``(tokens, features)`` matrices in the onnxruntime backend's
model of the traced sizes (export/token_rows.py): fewer kernels, the same elements.

The hand-built graphs run in onnxruntime with its optimizer off before and after the rewrite (so the test reads our
rewrite, not onnxruntime's fusions) and must agree bit for bit, keep their outputs' names and shapes, and be left
as they are where the rewrite would not save a kernel. The traced block checks the backend end to end: its
optimized graph has fewer Reshape kernels than with the rewrite off, and its answers are eager's on the traced
shapes and on new ones (the dynamic model, which the rewrite does not touch).
"""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import tracejit
from tracejit.backends.onnxruntime import OrtProgram
from tracejit.export import static_shapes
from tracejit.export.reshape_chains import collapse_reshape_chains, drop_identity_reshapes
from tracejit.export.token_rows import flatten_token_rows

ir = pytest.importorskip("onnx_ir")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")

F = 8


def _weights(seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((F, F)).astype(np.float32), rng.standard_normal(F).astype(np.float32))


def _block(shape, *, first=None, outside=None, position=None, ln_axis=-1, bias=True):
    """``x -> [first] -> linear -> relu -> linear -> layer norm -> y``; ``first`` an op on the input before the
    linears (``("Add", constant)``), ``outside`` a node reading the first linear's output that is not row-wise
    (``"Transpose"`` or ``("Reshape", target)``: a second output ``z``)."""
    inits, nodes, last = [], [], "x"
    if first is not None:
        op, const = first
        inits.append(numpy_helper.from_array(const, "c0"))
        nodes.append(helper.make_node(op, [last, "c0"], ["f0"]))
        last = "f0"
    for k in range(2):
        w, b = _weights(k)
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes.append(helper.make_node("MatMul", [last, f"w{k}"], [f"m{k}"]))
        last = f"m{k}"
        if bias:
            nodes.append(helper.make_node("Add", [last, f"b{k}"], [f"a{k}"]))
            last = f"a{k}"
        if k == 0:
            linear0 = last
            nodes.append(helper.make_node("Relu", [last], ["r0"]))
            last = "r0"
    inits += [numpy_helper.from_array(np.linspace(0.5, 1.5, F, dtype=np.float32), "scale"),
              numpy_helper.from_array(np.linspace(-1, 1, F, dtype=np.float32), "shift")]
    nodes.append(helper.make_node("LayerNormalization", [last, "scale", "shift"], ["y"], axis=ln_axis, epsilon=1e-5))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))]
    if outside == "Transpose":
        nodes.append(helper.make_node("Transpose", [linear0], ["z"], perm=[1, 0, 2]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    elif outside is not None:
        inits.append(numpy_helper.from_array(np.array(outside[1], dtype=np.int64), "target"))
        nodes.append(helper.make_node("Reshape", [linear0, "target"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


def _run(model: onnx.ModelProto, x: np.ndarray) -> list:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def _rewritten(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    m = ir.serde.deserialize_model(model)
    regions = flatten_token_rows(m.graph)
    collapse_reshape_chains(m.graph)
    drop_identity_reshapes(m.graph)
    out = ir.serde.serialize_model(m)
    onnx.checker.check_model(out)
    return out, regions


CASES = {
    "plain": dict(),
    "input-plus-bias": dict(first=("Add", np.arange(F, dtype=np.float32))),
    "per-feature-3d-constant": dict(first=("Mul", np.linspace(1, 2, F, dtype=np.float32).reshape(1, 1, F))),
    "position-table-of-the-full-shape": dict(first=("Add", np.arange(2 * 3 * F, dtype=np.float32).reshape(2, 3, F))),
    "positive-layer-norm-axis": dict(ln_axis=2),
    "read-by-a-transpose": dict(outside="Transpose"),
    "read-by-a-reshape-copying-dims": dict(outside=("Reshape", [0, 0, 2, 4])),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_rewritten_block_answers_bit_for_bit_and_keeps_its_outputs(case):
    model = _block((2, 3, F), **CASES[case])
    x = np.random.default_rng(1).standard_normal((2, 3, F)).astype(np.float32)
    rewritten, regions = _rewritten(model)
    assert regions == 1
    assert "MatMul" in [n.op_type for n in rewritten.graph.node]
    before, after = _run(model, x), _run(rewritten, x)
    assert [o.name for o in rewritten.graph.output] == [o.name for o in model.graph.output]
    for b, a in zip(before, after):
        assert a.shape == b.shape and np.array_equal(a, b)
    x2 = np.random.default_rng(2).standard_normal((2, 3, F)).astype(np.float32)   # other values move the output
    assert not np.array_equal(_run(rewritten, x2)[0], after[0])


def test_a_table_over_positions_is_not_read_as_per_feature():
    """A (1, seq, features) table added to a batch of 2: each row reads another entry, so the add is not row-wise;
    the rest of the block is, and the answer stays bit for bit."""
    model = _block((2, 3, F), first=("Add", np.arange(3 * F, dtype=np.float32).reshape(1, 3, F)))
    x = np.random.default_rng(3).standard_normal((2, 3, F)).astype(np.float32)
    rewritten, _ = _rewritten(model)
    assert np.array_equal(_run(rewritten, x)[0], _run(model, x)[0])
    add = next(n for n in rewritten.graph.node if n.op_type == "Add" and "c0" in n.input)
    assert add.input[0] == "x"   # computed on the (2, 3, 8) input, as before


def test_a_block_whose_rewrite_saves_nothing_is_left_alone():
    model = _block((2, 3, F), bias=False)   # no bias: onnxruntime writes no reshape around a plain MatMul
    rewritten, regions = _rewritten(model)
    assert regions == 0
    assert [n.op_type for n in rewritten.graph.node] == [n.op_type for n in model.graph.node]


class Block(nn.Module):
    """A post-norm transformer layer: attention with biased projections, GELU MLP, residuals, layer norms."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x):
        b, s, d = x.shape

        def split(t):
            return t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        att = nn.functional.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)))
        x = self.n1(x + self.o(att.transpose(1, 2).reshape(b, s, d)))
        return self.n2(x + self.down(nn.functional.gelu(self.up(x))))


def _reshape_kernels(traced, path, monkeypatch=None) -> tuple[OrtProgram, int]:
    program = OrtProgram(traced, optimized_model_path=path, threads=1)
    return program, [n.op_type for n in onnx.load(str(path)).graph.node].count("Reshape")


def test_the_backend_runs_fewer_reshapes_and_answers_as_eager(tmp_path, monkeypatch):
    torch.manual_seed(0)
    block = Block().eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(block, (torch.randn(2, 5, 16),))
    program, rows = _reshape_kernels(traced, tmp_path / "rows.onnx")
    monkeypatch.setattr(static_shapes, "flatten_token_rows", lambda graph: 0)
    plain, without = _reshape_kernels(traced, tmp_path / "plain.onnx")
    assert rows < without, (rows, without)
    for shape in [(2, 5, 16), (1, 7, 16), (2, 5, 16)]:   # pinned, dynamic, pinned again
        x = torch.randn(shape)
        with torch.no_grad():
            want = block(x)
        torch.testing.assert_close(program(x), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(program(x), plain(x), rtol=1e-6, atol=1e-6)


def _rms_block(shape, axes):
    """``linear -> x / sqrt(mean(x^2, axes) + eps) * weight -> linear``: the per-row mean is a (..., 1) row."""
    inits = [numpy_helper.from_array(np.array(axes, dtype=np.int64), "axes"),
             numpy_helper.from_array(np.float32(2.0), "two"), numpy_helper.from_array(np.float32(1e-6), "eps"),
             numpy_helper.from_array(np.linspace(0.5, 1.5, F, dtype=np.float32), "weight")]
    nodes = []
    for k, (src, dst) in enumerate([("x", "h0"), ("n", "y")]):
        w, b = _weights(k)
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes += [helper.make_node("MatMul", [src, f"w{k}"], [f"m{k}"]), helper.make_node("Add", [f"m{k}", f"b{k}"], [dst])]
        if k == 0:
            nodes += [helper.make_node("Pow", ["h0", "two"], ["sq"]),
                      helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
                      helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["rms"]),
                      helper.make_node("Div", ["h0", "rms"], ["d"]), helper.make_node("Mul", ["d", "weight"], ["n"])]
    graph = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                                               ir_version=8))


@pytest.mark.parametrize("axes, rewritten", [([-1], 1), ([2], 1), ([1], 0)], ids=["last", "last-positive", "seq"])
def test_a_mean_over_the_features_is_a_row_and_one_over_the_sequence_is_not(axes, rewritten):
    model = _rms_block((2, 3, F), axes)
    x = np.random.default_rng(4).standard_normal((2, 3, F)).astype(np.float32)
    out, regions = _rewritten(model)
    assert np.array_equal(_run(out, x)[0], _run(model, x)[0])
    reduce = next(n for n in out.graph.node if n.op_type == "ReduceMean")
    assert (reduce.input[0] != "sq") == bool(rewritten)   # computed on the matrix: its input renamed
