"""The inference pipeline: IR -> IR passes, each verified, in the order they run.

``freeze`` (in tracejit/inference.py) runs first for modules; then ``INFERENCE_PASSES`` (their
result is what a saved program holds); then ``IN_MEMORY_PASSES`` (what runs in this process).
"""
from __future__ import annotations

from ..ir import Graph, verify
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .drop_identities import drop_identities
from .fold_constants import fold_constants
from .fold_conv_bn import fold_conv_batch_norm
from .conv_layout import conv_weights_channels_last
from .graph_copy import copy_graph
from .linear_weight_layout import transpose_linear_weights
from .numpy_regions import fuse_numpy_regions


def dead_code_elimination(graph: Graph) -> Graph:
    """``eliminate_dead_code`` on a copy (it works in place)."""
    return eliminate_dead_code(copy_graph(graph))


INFERENCE_PASSES = (
    ("drop_identities", drop_identities),
    ("fold_conv_batch_norm", fold_conv_batch_norm),
    ("fold_constants", fold_constants),
    ("eliminate_common_subexpressions", eliminate_common_subexpressions),
    ("dead_code_elimination", dead_code_elimination),
    ("transpose_linear_weights", transpose_linear_weights),
    ("conv_weights_channels_last", conv_weights_channels_last),
)

# run after INFERENCE_PASSES on the graph that runs; what they emit lives in memory only, so a
# saved program keeps the graph before them (tracejit/inference.py)
IN_MEMORY_PASSES = (
    ("fuse_numpy_regions", fuse_numpy_regions),
)


def run_passes(graph: Graph, passes=INFERENCE_PASSES) -> Graph:
    """Run ``passes`` in order on copies of ``graph``; each result is verified."""
    for name, fn in passes:
        new = fn(graph)
        try:
            verify(new)
        except Exception as e:
            raise RuntimeError(f"inference pass {name} produced an invalid graph: {e}") from e
        new.training = graph.training
        graph = new
    return graph
