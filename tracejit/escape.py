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

_SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_SCRIPT_TABLE = str.maketrans(_SCRIPT_ESCAPES)


def _shown(c: str) -> bool:
    return c.isprintable() and unicodedata.category(c) not in ("Cf", "Zl", "Zp")


def terminal(text, keep_newlines: bool = False) -> str:
    """``text`` with every control or format character written as a Python escape (``\\x1b``,
    ``\\u202e``, ``\\n`` unless ``keep_newlines``), so nothing read from a file drives the terminal."""
    s = str(text)
    if s.isascii() and s.isprintable():
        return s   # the common case, at C speed
    return "".join(c if (c == "\n" and keep_newlines) or _shown(c) else ascii(c)[1:-1] for c in s)


def terminal_lines(text) -> str:
    """``terminal`` keeping line breaks: for text tracejit laid out from escaped parts."""
    return terminal(text, keep_newlines=True)


def script_json(data) -> str:
    """``data`` as JSON that is safe inside ``<script>...</script>`` (see the module docstring)."""
    return json.dumps(data, separators=(",", ":")).translate(_SCRIPT_TABLE)
