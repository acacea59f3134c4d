"""How much of a file's text and structure the viewer's page holds: a saved program may be crafted,
so every string it shows is cut here, values are shown through a bounded ``repr``, and the page's
script draws at most ``MAX_DRAWN`` nodes, lays out with dagre only graphs under ``MAX_DAGRE_WORK``
and expands calls at most ``MAX_EXPAND_DEPTH`` levels deep (the page says so where it stops).

The Python side bounds the document's size (a page proportional to the file, never to the square of
a part of it); the numbers for the page's script are handed to it in the document (``limits``)."""
from __future__ import annotations

import reprlib

MAX_TEXT = 240             # characters of one string a node, a graph or a ledger entry shows
MAX_DRAWN = 8_000          # nodes the page draws at once; expanding further shows calls collapsed
MAX_DAGRE_WORK = 3_000     # nodes + rank-spanning edge segments dagre may lay out in one graph; above:
#                            a plain layered layout, linear (dagre's is superlinear and recursive: a chain
#                            of 1,000 adds each taking the first input did not finish in 120 s, a chain of
#                            2,000 negations overflowed the stack)
MAX_EXPAND_DEPTH = 64      # levels of nested calls the page expands

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 4, MAX_TEXT, MAX_TEXT, 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 12


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis and the full length."""
    if len(text) <= limit:
        return text
    tail = f"\u2026 ({len(text)} characters)"
    return text[:max(0, limit - len(tail))] + tail


def short_repr(value) -> str:
    """``repr(value)`` of bounded cost and length: at most 12 items a list, 4 levels, 240 characters a string
    (a guard comparing a 100,000-element list shows its first items)."""
    try:
        return clip(_REPR.repr(value))
    except Exception:   # noqa: BLE001  a value whose repr fails still gets a description
        return f"<{type(value).__name__}>"
