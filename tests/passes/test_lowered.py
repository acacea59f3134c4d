"""Kernels live in the lowered program, not in the IR (issue #24 item 3; passes/lowered.py).

The in-memory passes are lowering passes, ``Lowered -> Lowered``: a kernel node's ``attrs.index`` names a
callable in ``Lowered.kernels``; no Graph holds one. ``lower`` runs them (verified, stamped); codegen gets
the table with the graph. A toy lowering pass shows the convention end to end."""
from __future__ import annotations


import pytest
import torch

import tracejit
from tracejit.codegen.python import generate
from tracejit.ir import Graph, Node, Value
from tracejit.ops.names import KERNEL
from tracejit.passes.graph_copy import copy_graph, replace_uses
from tracejit.passes.lowered import Lowered
from tracejit.passes.pipeline import lower, run_passes


def chain(x, y):
    return ((x * 2 + 1).sigmoid() * y - 3).abs() / 2


def test_lower_builds_kernels_beside_a_plain_graph_and_leaves_its_input_alone():
    torch.manual_seed(0)
    traced = tracejit.trace(chain, (torch.randn(16), torch.randn(16)))
    source = run_passes(traced.graph)
    before = str(source)
    lowered = lower(source)
    assert str(source) == before and "kernels" not in vars(source)      # the input is not written
    assert "kernels" not in Graph._FIELDS and not hasattr(Graph(), "kernels")   # the IR has no kernel table
    kernel_nodes = [n for n in lowered.graph.nodes if n.op == KERNEL]
    assert kernel_nodes and all(callable(lowered.kernel(n)) for n in kernel_nodes)
    assert [p[0] for p in lowered.graph.passes[-5:]] == ["blocked_conv_regions", "fuse_conv_kernels",
                                                         "fuse_numpy_regions", "fuse_linear_kernels",
                                                         "roi_align_kernels"]
    optimized = tracejit.optimize_for_inference(traced)
    assert optimized._fn.lowered.graph.passes == lowered.graph.passes
    # the optimized program runs this lowered program: its code is codegen's on the graph and its kernels
    assert optimized._fn.code == generate(optimized._fn.lowered.graph, "forward", guards=True,
                                          kernels=optimized._fn.lowered.kernels)[0]
    x, y = torch.randn(5), torch.randn(5)   # a new length: eager's answer
    torch.testing.assert_close(optimized(x, y), chain(x, y))


def test_a_kernel_node_without_its_table_is_a_clear_error():
    torch.manual_seed(0)
    traced = tracejit.trace(chain, (torch.randn(16), torch.randn(16)))
    lowered = lower(run_passes(traced.graph))
    with pytest.raises(ValueError, match=r"kernel node 0 of graph 'chain': the lowered program's kernel table "
                                         r"holds 0 \(generate a lowered graph with its kernels"):
        generate(lowered.graph, "forward")


def negations_to_kernel(lowered: Lowered) -> Lowered:
    """A toy lowering pass: each ``aten::neg`` becomes a kernel node calling ``torch.neg``."""
    graph, kernels = copy_graph(lowered.graph), list(lowered.kernels)
    for i, node in enumerate(list(graph.nodes)):
        if node.op != "aten::neg.default":
            continue
        new = Node(KERNEL, "", args=node.args, attrs={"index": len(kernels), "ops": "toy:neg"}, source=node.source)
        kernels.append(torch.neg)
        new.outputs = [Value(node.outputs[0].type, new, 0, None, node.outputs[0].dynamic)]
        graph.nodes[graph.nodes.index(node)] = new
        replace_uses(graph, {id(node.outputs[0]): new.outputs[0]})
    return Lowered(graph, tuple(kernels))


def test_a_toy_lowering_pass_runs_through_lower_and_codegen():
    def f(x):
        return -x.tanh() * 3 + x

    traced = tracejit.trace(f, (torch.randn(2, 4),))
    lowered = lower(traced.graph, passes=(("negations_to_kernel", negations_to_kernel),))
    assert [n.attrs["ops"] for n in lowered.graph.nodes if n.op == KERNEL] == ["toy:neg"]
    assert lowered.kernels == (torch.neg,) and lowered.graph.passes[-1][0] == "negations_to_kernel"
    assert not any(n.op == KERNEL for n in traced.graph.nodes)
    src, globs = generate(lowered.graph, "forward", kernels=lowered.kernels)
    namespace = dict(globs)
    exec(compile(src, "<toy>", "exec"), namespace)
    x = torch.randn(7, 4)   # another batch than the trace's
    with torch.no_grad():
        torch.testing.assert_close(namespace["forward"](None, x), f(x))
