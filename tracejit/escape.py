"""One escaping helper per sink for text that may come from a file (issue #21, item 5).

A saved program is untrusted: every string it holds (module types, parameter and argument names,
source file names, ledger messages, dict keys, guard text, string arguments) may carry terminal
escapes, bidi overrides, newlines that forge a line, or HTML that ends a script element. Each
sink has one function here, and every tool uses it:

- ``terminal(text)``: one line for a terminal: control and format characters (ESC, BEL, CR, LF,
  U+202E, U+2028, ...) shown as Python escapes;
- ``terminal_lines(text)``: the same, keeping ``\\n``: for blocks tracejit itself laid out whose
  file-derived parts went through ``terminal`` first (a file's newline is then already ``\\n``);
- ``script_json(data)``: JSON to embed in an HTML ``<script>`` element: every ``<``, ``>``, ``&``
  and the JavaScript line terminators U+2028 / U+2029 as ``\\uXXXX`` escapes, so no string can end
  the element, open a comment (``<!--``) or a nested ``<script>`` (which would keep ``</script>``
  from ending it), and the JSON stays the same data. The viewer's page puts no file string
  anywhere else (its script sets them as text nodes: ``textContent``).
"""
from __future__ import annotations

import json
import unicodedata

from .patterns import LazyPattern

_SCRIPT_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                   ("\u2029", "\\u2029"))
# candidates, checked one by one: everything but printable ASCII (and the newline, when kept)
_SUSPECT = LazyPattern(r"[^\x20-\x7e]")
_SUSPECT_KEEP_NEWLINES = LazyPattern(r"[^\x20-\x7e\n]")


def _shown(c: str) -> bool:
    return c.isprintable() and unicodedata.category(c) not in ("Cf", "Zl", "Zp")


_SEEN: dict = {}   # character -> how it is shown (a bounded alphabet: at most every code point once)


def _escaped(m) -> str:
    c = m.group()
    out = _SEEN.get(c)
    if out is None:
        out = _SEEN[c] = c if _shown(c) else ascii(c)[1:-1]
    return out


def terminal(text, keep_newlines: bool = False) -> str:
    """``text`` with every control or format character written as a Python escape (``\\x1b``,
    ``\\u202e``, ``\\n`` unless ``keep_newlines``), so nothing read from a file drives the terminal.
    Linear: only characters outside printable ASCII are looked at one by one."""
    return (_SUSPECT_KEEP_NEWLINES if keep_newlines else _SUSPECT).sub(_escaped, str(text))


def terminal_lines(text) -> str:
    """``terminal`` keeping line breaks: for text tracejit laid out from escaped parts."""
    return terminal(text, keep_newlines=True)


def script_json(data) -> str:
    """``data`` as JSON that is safe inside ``<script>...</script>`` (see the module docstring)."""
    text = json.dumps(data, separators=(",", ":"))
    for raw, escaped in _SCRIPT_ESCAPES:   # str.replace: C speed (str.translate with a dict is not)
        text = text.replace(raw, escaped)
    return text
