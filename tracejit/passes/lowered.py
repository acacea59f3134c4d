"""The lowered program: what the in-memory passes (``IN_MEMORY_PASSES``: numpy / numexpr regions, oneDNN conv
and linear) make of an optimized graph for the torch-CPU backend to run.

``Lowered(graph, kernels)``: ``graph`` is plain IR like any other (verified, printable, its node attributes
plain data); each ``tracejit::kernel`` node names its kernel by ``attrs.index`` into ``kernels``, the callables
the passes built, which live here, beside the graph, never in it (issue #24: kernels belong to the lowered
program, not to the IR). Codegen reads them from the table it is handed (``generate(..., kernels=...)``);
a saved program keeps the graph before these passes, so a file never names one.

A lowering pass is ``Lowered -> Lowered``: it copies the graph (``copy_graph``: a kernel node keeps its
index), appends the kernels it builds to a new table and never writes its input's graph or table.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Graph


@dataclass(frozen=True)
class Lowered:
    """A graph whose ``tracejit::kernel`` nodes call ``kernels[attrs.index]``."""
    graph: Graph
    kernels: tuple = ()

    def kernel(self, node):
        """The callable ``node`` (a ``tracejit::kernel`` node of ``graph``) runs."""
        return self.kernels[node.attrs["index"]]
