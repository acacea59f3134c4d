"""What a pass may do with a node: drop it when unused (DCE), merge it with an equal one (CSE).

These are two questions, and they were answered by two functions both called ``is_pure`` that
disagreed (ir/ops.is_pure said yes for a random op, passes/cse.is_pure no). Both answers were right
for their question, so both stay, under names that say which question they answer:

  droppable(op)     DCE may remove the node when nothing uses its outputs. ATen ops: yes (an unused
                    ``torch.rand`` is dropped, as torch.jit.trace drops it); tracejit ops: their OpDef's
                    ``pure`` (guards, call_module and setitem stay). Node.effectful keeps any node.
  mergeable(node)   CSE may reuse an earlier equal node's outputs: not effectful, not random (ATen's
                    ``nondeterministic_seeded`` tag or the recorder's mark), not uninitialized memory
                    (ops/overrides.py), and of tracejit's own ops only get_attr.
"""
from __future__ import annotations

from ..ir.ops import OPS
from . import aten
from .names import GET_ATTR


def droppable(op: str) -> bool:
    """May dead-code elimination drop an unused node of ``op``?"""
    d = OPS.get(op)
    return d.pure if d is not None else True


def mergeable(node) -> bool:
    """May common-subexpression elimination merge ``node`` with an equal earlier node?"""
    if node.effectful or node.attrs.get("nondeterministic"):
        return False
    if node.op in OPS:
        return node.op == GET_ATTR
    return aten.is_mergeable(node.op)
