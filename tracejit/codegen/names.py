"""Local names of generated code: minted ASCII identifiers that can never shadow what the code reads.

A hint (a parameter name, a module path, an op name; possibly from a loaded file) only colours
a minted name: it is made an identifier, kept out of keywords, ``RESERVED`` globals/builtins,
dunders and codegen's own ``_tj_`` namespace, and suffixed until unique.
"""
from __future__ import annotations

import keyword

from ..ir import Value
from ..ir.printer import Namer
from ..patterns import LazyPattern, ascii_word


class PyNamer(Namer):
    """Mints every local name of generated code: ASCII identifiers made from a hint, never a
    keyword, a name the generated code reads as a global or builtin, nor one of codegen's own
    ``_tj_`` names. Hints may come from a loaded file; they only ever colour a minted name."""

    def __init__(self, graph, sigil: str = ""):
        self.next_suffix: dict[str, int] = {}
        super().__init__(graph, sigil)

    def define(self, v: Value, hint: str | None = None) -> str:
        name = self.mint(hint)
        self.names[id(v)] = name
        return name

    def mint(self, hint: str | None) -> str:
        base = safe_identifier(hint)
        name = base
        i = self.next_suffix.get(base, 1)
        while name in self.used:          # one step per clash: linear in the number of names
            name = f"{base}_{i}"
            i += 1
        self.next_suffix[base] = i
        self.used.add(name)
        return name


_NON_IDENT = LazyPattern(r"[^A-Za-z0-9_]")
# names the generated code itself reads (globals and builtins); a local may never take one
# (tests/security checks that every global of generated code is in this set or is a _tj_ name)
RESERVED = frozenset({"self", "torch", "Tensor", "isinstance", "float", "int", "bool", "complex", "getattr",
                      "slice", "len", "tuple", "list", "dict", "set", "type", "repr", "str", "format", "_input_error",
                      "_no_grad", "_observe", "_"})


def safe_identifier(hint: str | None, limit: int = 60) -> str:
    """An ASCII identifier that codegen may bind: derived from ``hint`` but never a keyword,
    a reserved global/builtin, a dunder, or in codegen's ``_tj_`` namespace."""
    base = (hint or "v")[:limit]
    if not ascii_word(base):   # most hints are names already: no pattern to run
        base = _NON_IDENT.sub("_", base) or "v"
    if base[0].isdigit():
        base = "v" + base
    if base.startswith("_tj") or base.startswith("__"):
        base = "u" + base
    if keyword.iskeyword(base) or base in RESERVED:
        base += "_"
    return base
