"""passes/linear_weight_layout.py: constant linear weights stored transposed, same numbers."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.passes.linear_weight_layout import transpose_linear_weights, transposed_weights

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class TiedHead(nn.Module):
    """A linear layer, and an embedding whose table a second linear reuses (tied weights)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(50, 32)
        self.proj = nn.Linear(32, 32)

    def forward(self, ids):
        h = torch.relu(self.proj(self.emb(ids)))
        return nn.functional.linear(h, self.emb.weight)


def test_only_weights_used_by_linear_alone_are_transposed_and_answers_are_eagers():
    m = TiedHead().eval()
    ids = torch.randint(0, 50, (2, 70))   # large enough that the torch path runs the linears
    traced = tracejit.freeze(tracejit.trace(m, (ids,)))
    before = [c.stride() for c in traced.graph.constants]
    out = transpose_linear_weights(traced.graph)
    assert [c.stride() for c in traced.graph.constants] == before   # the input graph is untouched
    # freeze keeps the tied table one constant (passes/freeze.py); the embedding also reads it, so it
    # keeps its layout (no second copy of the table) and only proj's weight is transposed
    assert transposed_weights(out) == 1
    tables = [c for c in out.constants if c.shape == (50, 32)]
    assert [c.is_contiguous() for c in tables] == [True]
    shared = transpose_linear_weights(_one_constant_for_both_uses(traced.graph))
    assert [c.is_contiguous() for c in shared.constants if c.shape == (50, 32)] == [True]
    fast = tracejit.optimize_for_inference(tracejit.trace(m, (ids,)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = torch.jit.trace(m, (ids,))
    for shape in ((2, 70), (1, 5), (3, 130)):
        x = torch.randint(0, 50, shape)
        with torch.no_grad():
            torch.testing.assert_close(fast(x), m(x), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(fast(x), ref(x), rtol=1e-5, atol=1e-6)


def _one_constant_for_both_uses(graph):
    """The graph with the embedding and the second linear reading one constant node."""
    from tracejit.passes.graph_copy import copy_graph, replace_uses
    g = copy_graph(graph)
    consts = [n for n in g.nodes if n.op == "tracejit::constant" and g.constants[n.attrs["index"]].shape == (50, 32)]
    replace_uses(g, {id(consts[1].outputs[0]): consts[0].outputs[0]})
    g.nodes = [n for n in g.nodes if n is not consts[1]]
    return g


def test_transformer_layers_keep_their_answers_and_save_load():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    m = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    x = torch.randn(1, 40, 32)
    with torch.no_grad():
        fast = tracejit.optimize_for_inference(tracejit.trace(m, (x,)))
    assert transposed_weights(fast.graph) >= 6
    buf = io.BytesIO()
    tracejit.save(fast, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    for n in (40, 17):
        y = torch.randn(1, n, 32)
        with torch.no_grad():
            torch.testing.assert_close(fast(y), m(y), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(loaded(y), m(y), rtol=1e-4, atol=1e-5)


class Classifier(nn.Module):
    """A pooled feature vector and a 10-class linear head (Inception-v3's classifier at batch 1)."""

    def __init__(self, features=2048, classes=10):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(features, classes)

    def forward(self, x):
        return self.fc(torch.relu(x).mean((2, 3)))


@pytest.mark.parametrize("batch,features,classes", [(1, 2048, 10), (1, 512, 1000), (8, 2048, 10)])
def test_a_head_whose_transposed_product_sums_otherwise_keeps_eagers_bits(batch, features, classes):
    """Few rows or few outputs: this CPU's BLAS runs the transposed weight as another kernel, which sums in
    another order (2-3x further from float64): the weight stays plain and the answer is eager's to the bit, on new
    inputs of the traced batch."""
    from tracejit.passes.linear_weight_layout import same_bits
    m = Classifier(features, classes).eval()
    fast = tracejit.optimize_for_inference(tracejit.trace(m, (torch.randn(batch, features, 3, 3),)))
    if same_bits(batch, features, classes, torch.float32, True):
        pytest.skip("this CPU's BLAS gives the same bits in both layouts at this shape")
    assert transposed_weights(fast.graph) == 0
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(batch, features, 3, 3, generator=gen) * 4
            assert torch.equal(fast(x), m(x))


def test_a_transposed_weight_is_one_the_probe_found_exact():
    """16 rows by 64 features and outputs: the same bits in both layouts here, so the weight is transposed (the
    speed) and its products are the plain weight's to the bit on new inputs of that shape."""
    from tracejit.passes.linear_weight_layout import same_bits
    if not same_bits(16, 64, 64, torch.float32, True):
        pytest.skip("this CPU's BLAS sums the transposed product otherwise at this shape")
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).eval()
    fast = tracejit.optimize_for_inference(tracejit.trace(m, (torch.randn(16, 64),)))
    assert transposed_weights(fast.graph) == 2
    weights = [c for c in fast.graph.constants if isinstance(c, torch.Tensor) and c.dim() == 2]
    with torch.no_grad():
        for w in weights:
            x, b = torch.randn(16, 64), torch.randn(64)
            assert not w.is_contiguous() and torch.equal(nn.functional.linear(x, w, b),
                                                         nn.functional.linear(x, w.contiguous(), b))
