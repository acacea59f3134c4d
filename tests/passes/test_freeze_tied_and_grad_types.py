"""passes/freeze.py: tied weights freeze to one shared copy (in memory and in the saved file), and
frozen constants and what is computed only from them are typed as not requiring grad; numbers
against eager and torch.jit's trace + freeze on new inputs."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.ir import TensorType

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class TiedLM(nn.Module):
    """A language-model head sharing the embedding matrix (as GPT-2 and BERT's MLM head do)."""

    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mix(self.emb(ids))))


def frozen_constants(program) -> list:
    return [c for c in program.forward.graph.constants if isinstance(c, torch.Tensor)]


def jit_frozen(model, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.freeze(torch.jit.trace(model, example))


@pytest.mark.parametrize("make", [tracejit.freeze, tracejit.optimize_for_inference])
def test_tied_weights_freeze_to_one_copy_and_match_eager_and_jit(make):
    torch.manual_seed(0)
    model = TiedLM().eval()
    example = (torch.randint(0, 50, (1, 5)),)
    program = make(tracejit.trace(model, example))
    ref = jit_frozen(model, example)
    shapes = [tuple(c.shape) for c in frozen_constants(program)]
    assert shapes.count((50, 16)) == 1, shapes
    with torch.no_grad():
        for ids in (torch.randint(0, 50, (1, 5)), torch.randint(0, 50, (3, 9)), torch.randint(0, 50, (2, 1))):
            torch.testing.assert_close(program(ids), model(ids), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(program(ids), ref(ids), rtol=1e-5, atol=1e-6)


def test_the_saved_file_holds_the_tied_matrix_once_and_loads_right():
    torch.manual_seed(1)
    model = TiedLM(vocab=2000, dim=64).eval()   # the matrix (512 KB) dominates the file
    example = (torch.randint(0, 2000, (1, 4)),)
    frozen = tracejit.freeze(tracejit.trace(model, example))
    buf = io.BytesIO()
    tracejit.save(frozen, buf)
    matrix = 2000 * 64 * 4
    assert matrix < len(buf.getvalue()) < 1.5 * matrix
    loaded = tracejit.load(io.BytesIO(buf.getvalue()))
    ids = torch.randint(0, 2000, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids), rtol=1e-5, atol=1e-6)


def test_a_frozen_program_is_a_snapshot_where_torch_jits_freeze_follows_in_place_changes():
    """A deliberate difference (docs/COMPAT.md): torch.jit's freeze keeps the module's tensors, so an
    in-place change reaches it; tracejit.freeze copies, as optimize_for_inference must (folded and
    re-laid-out weights could not follow such a change), so every path gives the same snapshot."""
    torch.manual_seed(2)
    model = TiedLM().eval()
    example = (torch.randint(0, 50, (1, 5)),)
    frozen, ofi = tracejit.freeze(tracejit.trace(model, example)), \
        tracejit.optimize_for_inference(tracejit.trace(model, example))
    ref = jit_frozen(model, example)
    ids = torch.randint(0, 50, (2, 6))
    with torch.no_grad():
        before = model(ids)
        model.emb.weight.mul_(2)
        torch.testing.assert_close(frozen(ids), before)
        torch.testing.assert_close(ofi(ids), before, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ref(ids), model(ids), rtol=1e-5, atol=1e-6)   # torch.jit's follows eager
        assert not torch.allclose(model(ids), before)


def test_frozen_constants_and_values_built_only_from_them_do_not_require_grad():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    traced = tracejit.trace(model, (torch.randn(3, 4),))
    assert traced.forward.graph.nodes[-1].outputs[0].type.requires_grad is True   # traced with parameters
    frozen = tracejit.freeze(traced)
    for node in frozen.forward.graph.nodes:
        for v in node.outputs:
            if v is not None and isinstance(v.type, TensorType):
                assert v.type.requires_grad is False, (node.op, v.type)
    # the values still follow the caller's input at run time: a tracked input gives eager's gradient
    x = torch.randn(5, 4, requires_grad=True)
    frozen(x).sum().backward()
    x2 = x.detach().clone().requires_grad_()
    model(x2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    assert all(p.grad is not None for p in model.parameters())   # eager's parameters got theirs
    assert not any(c.requires_grad for c in frozen_constants(frozen))


def test_an_input_that_requires_grad_keeps_its_values_typed_so():
    model = nn.Linear(4, 2).eval()
    x = torch.randn(3, 4, requires_grad=True)
    frozen = tracejit.freeze(tracejit.trace(model, (x,)))
    (linear,) = [n for n in frozen.forward.graph.nodes if n.op == "aten::linear.default"]
    assert linear.outputs[0].type.requires_grad is True


def test_the_exported_onnx_model_holds_the_tied_matrix_once_and_runs_right():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(4)
    model = TiedLM().eval()
    program = tracejit.freeze(tracejit.trace(model, (torch.randint(0, 50, (1, 5)),)))
    buf = io.BytesIO()
    tracejit.export_onnx(program, buf)
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    shapes = [tuple(t.dims) for t in proto.graph.initializer]
    assert shapes.count((50, 16)) == 1, shapes
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    ids = torch.randint(0, 50, (3, 8))
    (got,) = session.run(None, {session.get_inputs()[0].name: ids.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(got), model(ids), rtol=1e-5, atol=1e-5)
