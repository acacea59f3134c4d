"""docs/DESIGN.md "Adding a pass", done on a toy: a pass that folds ``-(-x)`` to ``x``, written as every
inference pass is (Graph -> new Graph, the input untouched), joins ``INFERENCE_PASSES`` and runs through
``optimize_for_inference`` end to end."""
import pytest
import torch
from torch import nn

import tracejit
from tracejit.ir import Graph, Value
from tracejit.passes import pipeline
from tracejit.passes.graph_copy import copy_graph, replace_uses

NEG = "aten::neg.default"


def fold_double_negation(graph: Graph) -> Graph:
    """``neg(neg(x))`` -> ``x``; the inner neg, left unused, is dead code's to drop."""
    out = copy_graph(graph)                   # step 1 of the recipe: work on a copy, never on the input
    mapping, kept = {}, []
    for node in out.nodes:
        x = node.args[0] if node.args else None
        if node.op == NEG and isinstance(x, Value) and x.producer is not None and x.producer.op == NEG:
            mapping[id(node.outputs[0])] = x.producer.args[0]
            continue
        kept.append(node)
    out.nodes = kept
    replace_uses(out, mapping)
    return out


class TwoNegs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return torch.neg(-self.fc(x)) * 2


def test_a_toy_pass_joins_the_pipeline_and_runs_end_to_end(monkeypatch):
    torch.manual_seed(0)
    model = TwoNegs().eval()
    traced = tracejit.trace(model, torch.randn(2, 4))
    assert [n.op for n in traced.graph.nodes].count(NEG) == 2
    before = str(traced.graph)
    # step 2: one entry in the pipeline (here patched in; in the package, a line in passes/pipeline.py)
    monkeypatch.setattr(pipeline, "INFERENCE_PASSES", (("fold_double_negation", fold_double_negation),)
                        + pipeline.INFERENCE_PASSES)
    optimized = tracejit.optimize_for_inference(traced)
    assert NEG not in [n.op for n in optimized.graph.nodes]             # folded, then the inner one dropped
    stamps = dict((name, (b, a)) for name, b, a in optimized.graph.passes)
    assert stamps["fold_double_negation"][0] - stamps["fold_double_negation"][1] == 1
    assert stamps["dead_code_elimination"][0] - stamps["dead_code_elimination"][1] >= 1
    assert str(traced.graph) == before                                   # the traced program is untouched
    x = torch.randn(5, 4)                                                # another batch size
    assert not torch.equal(model(x), model(torch.randn(5, 4)))
    torch.testing.assert_close(optimized(x), model(x))
    torch.testing.assert_close(optimized(x), torch.jit.trace(model, torch.randn(2, 4))(x))


def test_a_pass_that_breaks_the_graph_is_named():
    def drop_everything(graph):
        out = copy_graph(graph)
        out.nodes = []
        return out
    traced = tracejit.trace(TwoNegs().eval(), torch.randn(2, 4))
    with pytest.raises(RuntimeError, match="inference pass drop_everything produced an invalid graph"):
        pipeline.run_passes(traced.graph, (("drop_everything", drop_everything),))
