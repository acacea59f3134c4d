"""The torch-CPU kernels backend: freeze, then the inference passes (passes/pipeline.py), run by
backends/torch_kernels.py's lean traced objects (numpy, numexpr and oneDNN kernels in memory)."""
from __future__ import annotations

from .torch_program import optimized

NAME = "torch"


def build(traced, **options):
    """``optimize_for_inference(traced)``'s program; its ``.backend`` is ``"torch"``."""
    if options:
        raise TypeError(f"optimize_for_inference: the torch backend takes no options; got {sorted(options)}")
    return optimized(traced)
