"""In-place reuse of dead intermediates (codegen/inplace.py) is decided on the graph that is compiled."""
from __future__ import annotations

import pytest
import torch

import tracejit
from tracejit.codegen.inplace import inplace_candidates

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def twice_sin(a):
    x = a.sin()
    y = x.cos()      # x has one use here: cos may overwrite it in place
    z = a.sin()      # common subexpression: after CSE, x has a second use
    return y, z.exp()


def test_reuse_follows_common_subexpression_elimination():
    """optimize_for_inference merges the two sins: the cos must no longer overwrite their result."""
    # traced large enough that optimize_for_inference keeps torch's ops (small float32 runs become a
    # numpy kernel, passes/numpy_regions.py)
    traced = tracejit.trace(twice_sin, torch.randn(5000))
    optimized = tracejit.optimize_for_inference(traced)
    assert optimized.code.count(".sin(") == 1
    assert "cos_()" not in optimized.code and "cos_()" in traced.code
    a = torch.randn(7)
    reference = torch.jit.trace(twice_sin, torch.randn(5))(a)
    with torch.no_grad():
        for got in (optimized(a), traced(a)):
            for g, e, r in zip(got, twice_sin(a), reference):
                torch.testing.assert_close(g, e)
                torch.testing.assert_close(g, r)


def test_the_analysis_writes_nothing_into_the_graph():
    traced = tracejit.trace(twice_sin, torch.randn(5))
    found = inplace_candidates(traced.graph)
    assert sorted(found.values()) == ["cos_", "exp_"]
    assert not any("inplace" in n.attrs for n in traced.graph.nodes)
