"""``aten::_grouped_mm`` (transformers' mixture of experts) exports to ONNX (export/grouped_mm.py): torch_lib refused
it ("Grouped matmul with offsets (ragged/MoE) is not supported"), so Mixtral / Qwen2-MoE had no ONNX model. Each row
times every expert, then its own expert's row picked; the onnxruntime answer equals eager to float32 rounding on
new numbers of tokens."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit

ort = pytest.importorskip("onnxruntime")


class Experts(nn.Module):
    """Tokens sorted by expert, counted, one grouped product, scattered back to token order."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 8, 16) / 3)

    def forward(self, x):
        ids = (x[:, 0].abs() * 2).long().clamp(max=2)
        ids, perm = torch.sort(ids)
        offs = torch.cumsum(torch.histc(ids.float(), bins=3, min=0, max=2), 0, dtype=torch.int32)
        y = torch._grouped_mm(x[perm], self.w, offs=offs)
        out = torch.zeros_like(y)
        out[perm] = y   # back in token order (a tie in the sort may order tokens another way)
        return out


class Batched(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 8, 16))

    def forward(self, x):
        return torch._grouped_mm(x, self.w)


def _run(proto, x):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


@pytest.mark.parametrize("model, example, news", [
    (Experts, (6, 8), [(11, 8), (40, 8), (1, 8)]),
    (Batched, (3, 4, 8), [(3, 7, 8)]),
])
def test_grouped_products_export_with_eagers_answers(model, example, news):
    torch.manual_seed(0)
    m = model().eval()
    traced = tracejit.trace(m, torch.randn(*example))
    proto = tracejit.export_onnx(traced)
    for shape in news:
        x = torch.randn(*shape)
        torch.testing.assert_close(_run(proto, x), m(x), rtol=1e-5, atol=1e-5)


def test_other_forms_are_refused_by_name():
    def ragged_k(a, b, offs):
        return torch._grouped_mm(a, b, offs=offs)

    traced = tracejit.trace(ragged_k, (torch.randn(4, 16), torch.randn(16, 8), torch.tensor([8, 16], dtype=torch.int32)))
    with pytest.raises(tracejit.ExportError, match=r"_grouped_mm of ranks \(2, 2\)"):
        tracejit.export_onnx(traced)


def test_the_ragged_form_multiplies_each_row_by_its_own_group_only():
    """Linear in the number of groups: a Loop over the groups, each multiplying its rows by its matrix; no
    product of every row with the whole [G, K, N] weight (before: MatMul to [G, S, N], G times the work)."""
    torch.manual_seed(0)
    m = Experts().eval()
    proto = tracejit.export_onnx(tracejit.trace(m, torch.randn(6, 8)))
    weights = {t.name for t in proto.graph.initializer if len(t.dims) == 3}
    assert weights
    top = [n for n in proto.graph.node if n.op_type == "MatMul"]
    assert not any(n.input[1] in weights for n in top)
    loops = [n for n in proto.graph.node if n.op_type == "Loop"]
    assert len(loops) == 1
    body = loops[0].attribute[0].g
    assert [n.op_type for n in body.node].count("MatMul") == 1
