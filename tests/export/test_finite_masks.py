"""An attention mask made of finite constants needs no hidden-row check in the model of fixed sizes
(export/finite_masks.py): T5's ``where(keep, position_bias, finfo.min)`` lost its Equal / Not / Cast / ReduceMax /
Mul chain per layer, with the same answers; a mask that may hold -inf (an input, a value computed at run time)
keeps it, and so does a layer norm's weight of ones.

Hand-built graphs run in onnxruntime with its optimizer off, before and after the rewrite (bit for bit); the traced
attention checks the backend end to end on new inputs against eager.
"""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import tracejit
from tracejit.backends.onnxruntime import OrtProgram
from tracejit.export import static_shapes
from tracejit.export.finite_masks import drop_multiplications_by_one, fold_finite_mask_checks
from tracejit.export.tidy import fold_constants

ir = pytest.importorskip("onnx_ir")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")

MIN = float(np.finfo(np.float32).min)


def _masked_attention(mask_from_input: bool, ones_weight: bool = False):
    """scores (2, 4, 4) + max(mask, -3e38) -> softmax -> @ v -> * visible, visible = ReduceMax(Cast(Not(Equal(mask,
    -inf)))); the mask ``Where(keep, bias, MIN)`` of constants, or the input ``m`` itself; then ``* w`` (ones
    when ``ones_weight``: a layer norm's scale, which must stay)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((2, 4, 4)).astype(np.float32), "bias"),
             numpy_helper.from_array(np.array(MIN, np.float32), "fmin"),
             numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf"),
             numpy_helper.from_array(np.array(-3.0e38, np.float32), "masked"),
             numpy_helper.from_array(np.array([-1], np.int64), "last"),
             numpy_helper.from_array((np.ones(4) if ones_weight else rng.standard_normal(4)).astype(np.float32), "w")]
    nodes = []
    if mask_from_input:
        mask = "m"
    else:
        nodes += [helper.make_node("Where", ["keep", "bias", "fmin"], ["mask"])]
        mask = "mask"
    nodes += [helper.make_node("Max", [mask, "masked"], ["biased"]),
              helper.make_node("Add", ["s", "biased"], ["scores"]),
              helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["o"]),
              helper.make_node("Equal", [mask, "ninf"], ["hidden"]),
              helper.make_node("Not", ["hidden"], ["keepf"]),
              helper.make_node("Cast", ["keepf"], ["keepc"], to=TensorProto.FLOAT),
              helper.make_node("ReduceMax", ["keepc", "last"], ["visible"], keepdims=1),
              helper.make_node("Mul", ["o", "visible"], ["out"]),
              helper.make_node("Mul", ["out", "w"], ["y"])]
    inputs = [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 4, 4]),
              helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 4, 4])]
    inputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 4, 4]) if mask_from_input
                  else helper.make_tensor_value_info("keep", TensorProto.BOOL, [2, 4, 4]))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 4])],
                              inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                                               ir_version=8))


def _rewritten(proto):
    model = ir.serde.deserialize_model(proto)
    fold_constants(model, drop_unread=True)
    factors = fold_finite_mask_checks(model.graph)
    if factors:
        fold_constants(model, drop_unread=True)
        drop_multiplications_by_one(factors)
    return ir.serde.serialize_model(model)


def _run(proto, feed):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None,
                                                                                                           feed)[0]


def _ops(proto):
    return [n.op_type for n in proto.graph.node]


@pytest.mark.parametrize("ones_weight", [False, True])
def test_a_mask_of_finite_constants_loses_its_hidden_row_check_bit_for_bit(ones_weight):
    proto = _masked_attention(mask_from_input=False, ones_weight=ones_weight)
    after = _rewritten(proto)
    ops = _ops(after)
    for gone in ("Equal", "Not", "Cast", "ReduceMax"):
        assert gone not in ops, ops
    assert ops.count("Mul") == 1   # the factor of ones is gone; the weight stays, even when it is ones
    assert "Max" in ops            # MIN is under the -3e38 floor: the Max changes values, it stays
    rng = np.random.default_rng(1)
    for _ in range(3):
        keep = rng.random((2, 4, 4)) > 0.5
        keep[0, 1] = False   # a row that sees no key: MIN is finite, so eager's answer is the mean of v
        feed = {"s": rng.standard_normal((2, 4, 4)).astype(np.float32),
                "v": rng.standard_normal((2, 4, 4)).astype(np.float32), "keep": keep}
        want = _run(proto, feed)
        assert np.isfinite(want).all() and np.abs(want[0, 1]).sum() > 0
        np.testing.assert_array_equal(_run(after, feed), want)


def test_a_mask_read_from_an_input_keeps_its_check():
    proto = _masked_attention(mask_from_input=True)
    after = _rewritten(proto)
    for kept in ("Equal", "Not", "Cast", "ReduceMax", "Max"):
        assert kept in _ops(after)
    rng = np.random.default_rng(2)
    m = np.where(rng.random((2, 4, 4)) > 0.5, 0.0, -np.inf).astype(np.float32)
    m[1, 2] = -np.inf   # a hidden row: zeros
    feed = {"s": rng.standard_normal((2, 4, 4)).astype(np.float32), "v": rng.standard_normal((2, 4, 4)).astype(
        np.float32), "m": m}
    got = _run(after, feed)
    np.testing.assert_array_equal(got, _run(proto, feed))
    assert (got[1, 2] == 0).all()


class RelativeAttention(nn.Module):
    """T5's pattern: a constant position bias where the padding mask keeps a key, the float minimum elsewhere."""

    def __init__(self, length: int = 6, dim: int = 16, heads: int = 2):
        super().__init__()
        torch.manual_seed(0)
        self.heads, self.proj = heads, nn.Linear(dim, 3 * dim)
        self.position_bias = nn.Parameter(torch.randn(1, heads, length, length))

    def forward(self, x, attention_mask):
        b, s, d = x.shape
        q, k, v = self.proj(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        keep = attention_mask[:, None, None, :].bool()
        mask = torch.where(keep, self.position_bias[:, :, :s, :s], torch.finfo(x.dtype).min)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)


def test_the_backend_drops_the_check_and_answers_as_eager_on_new_inputs(monkeypatch):
    model = RelativeAttention().eval()
    x, mask = torch.randn(2, 6, 16), torch.ones(2, 6, dtype=torch.long)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (x, mask))
    for rewrite in (fold_finite_mask_checks, lambda graph: []):
        monkeypatch.setattr(static_shapes, "fold_finite_mask_checks", rewrite)
        program = OrtProgram(traced, threads=1)
        pinned = static_shapes.with_input_sizes(onnx.load_from_string(program._model_bytes), program.pinned_sizes)
        ops = _ops(pinned)
        if rewrite is fold_finite_mask_checks:
            assert "Equal" not in ops and "ReduceMax" not in ops, ops
        else:
            assert "Equal" in ops and "ReduceMax" in ops, ops
        gen = torch.Generator().manual_seed(3)
        for _ in range(3):   # the traced shapes: the pinned model
            xn = torch.randn(2, 6, 16, generator=gen)
            mn = (torch.rand(2, 6, generator=gen) > 0.3).long()
            mn[1] = 0   # a sequence of padding only: every key hidden, eager's answer is the mean of v
            want = model(xn, mn)
            assert not torch.equal(want, model(xn, torch.ones_like(mn)))   # the mask moves the answer
            torch.testing.assert_close(program(xn, mn), want, rtol=1e-5, atol=1e-5)
