"""The checks decoding makes on a document's names and node attributes (encode.decode_graph,
program_decoder.py): always, on a code-cache hit too (code_cache.py), unlike validate.py's per-op checks.
They guard what becomes Python source: a keyword name, a method name, an attribute's type."""
from __future__ import annotations

import keyword

from ..errors import LoadError
from ..ir.ops import saved_attrs
from ..patterns import ascii_identifier
from ..runtime.traced import TracedModule


def identifier(name, where: str) -> str:
    """An ASCII identifier that is no keyword (non-ASCII ones are NFKC-normalised by Python)."""
    if not ascii_identifier(name, 200) or keyword.iskeyword(name):
        raise LoadError(f"{where}: {str(name)[:60]!r} is not an ASCII Python identifier")
    return name


def method_name(name, where: str, taken=()) -> str:
    """A traced method's name: installed on a module, so never private, a dunder or an attribute
    a TracedModule already has, on its class (``train``, ``to``, ``__call__``) or on every instance
    (``training``, ``original_name``, ``ledger``), except ``forward``; never one of ``taken`` either
    (the names of the parameters, buffers and submodules of the module it is installed on)."""
    identifier(name, where)
    if name == "forward":
        return name
    if name.startswith("_") or name in _module_attributes():
        raise LoadError(f"{where}: {name!r} cannot name a traced method (it is private or an attribute every "
                        "module already has)")
    if name in taken:
        raise LoadError(f"{where}: {name!r} cannot name a traced method (the module has a parameter, buffer or "
                        "submodule of that name)")
    return name


_MODULE_ATTRIBUTES: set = set()


def _module_attributes() -> set:
    """Every attribute name a fresh TracedModule answers to: its class's and its instance's (default-deny:
    a name nn.Module gains in a later torch version is refused without a change here)."""
    if not _MODULE_ATTRIBUTES:
        _MODULE_ATTRIBUTES.update(dir(TracedModule), vars(TracedModule("probe")))
    return _MODULE_ATTRIBUTES


def check_attrs(op: str, attrs: dict, where: str) -> None:
    """Node attributes are data of a fixed shape: known keys, each of its type (ir/ops.py's table)."""
    allowed = saved_attrs(op)
    for k, v in attrs.items():
        want = allowed.get(k)
        if want is None:
            raise LoadError(f"{where}: unknown node attribute {str(k)[:40]!r} for {str(op)[:60]}")
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise LoadError(f"{where}: attribute {k!r} must be a {want.__name__}")
        if want is int and not 0 <= v <= 1_000_000:
            raise LoadError(f"{where}: attribute {k!r} is out of range")
        if want is str and len(v) > 1000:
            raise LoadError(f"{where}: attribute {k!r} is too long")
