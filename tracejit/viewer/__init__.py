"""Graph viewer: a traced program as one self-contained, interactive HTML page.

    >>> tracejit.view(traced, "model.html")        # doctest: +SKIP
    >>> traced.to_html("model.html")                # doctest: +SKIP

The page shows the module hierarchy as collapsible groups (a submodule call is one box until
clicked), each node's ATen op, output dtype and shape and the user's source line, the input
guards, the inputs and outputs with their structure, the ledger (nodes on a ledger line are
outlined in red) and a search box over every graph. It needs no network: the layout library
(dagre, MIT, vendored in ``static/``), the app and the data are inline.
"""
from __future__ import annotations

import os

from ..serialize import read_program
from .document import program_document
from .html import render_html, write_html

__all__ = ["view", "program_document", "render_html"]


def view(obj, path) -> str:
    """Write the viewer page for ``obj`` (a Program, a TracedModule / TracedFunction, or the path of a saved
    tracejit file) to ``path``; returns ``path``."""
    if isinstance(obj, (str, os.PathLike)):   # the file's Program, decoded and validated; nothing compiled
        obj = read_program(obj, map_location="meta")
    return write_html(program_document(obj), path)
