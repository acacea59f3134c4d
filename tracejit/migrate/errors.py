"""The error migration raises, and how it names a TorchScript node."""
from __future__ import annotations

import re

from ..errors import TraceError
from ..ir import SourceLoc


class MigrationError(TraceError):
    """A TorchScript archive holds something tracejit cannot express (control flow, an op with no
    ATen name, a Python call), or the migrated program does not reproduce the archive."""


_TRACE_FRAME = re.compile(r"^(.*)\((\d+)\): (\S+)$")
_SERIALIZED = re.compile(r'File "([^"]*)", line (\d+)')


def node_source(node) -> SourceLoc | None:
    """The user's source line TorchScript kept for ``node``: the innermost frame of the trace's
    stack, else the line of the archive's serialized code."""
    text = node.sourceRange() or ""
    for line in text.splitlines():
        m = _TRACE_FRAME.match(line.strip())
        if m:
            return SourceLoc(m.group(1), int(m.group(2)), m.group(3))
    m = _SERIALIZED.search(text)
    if m:
        return SourceLoc(m.group(1), int(m.group(2)), "")
    return None


def describe_node(node, where: str) -> str:
    """``aten::foo (%3) at model.py:12 in module 'encoder.layer.0', method 'forward'``."""
    outs = ", ".join("%" + o.debugName() for o in node.outputs())
    src = node_source(node)
    return f"{node.kind()}{f' ({outs})' if outs else ''}{f' at {src}' if src else ''} in {where}"
