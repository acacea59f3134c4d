"""Guard nodes that are built the same way by the tracer, the decoder (old files) and migrate.

>>> training_guard(False).attrs["expected"]
False
"""
from __future__ import annotations

from .graph import Node
from .ops import GUARD


def training_guard(training: bool) -> Node:
    """The guard on the module's training flag, first in a root method's graph."""
    mode = "train" if training else "eval"
    return Node(GUARD, "", (), attrs={"kind": "training", "test": "training", "expected": bool(training),
                                      "seen": bool(training), "what": f"the module was traced in {mode} mode",
                                      "line": ""}, effectful=True)
