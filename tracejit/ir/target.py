"""A node's call target: which Python entry point codegen calls to run the node's op.

One structured value, parsed from and printed to the ``"kind:name"`` text of ``.graph`` and
of saved files, here and nowhere else:

    method:view              args[0].view(*args[1:], **kwargs)
    fn:torch.conv2d          torch.conv2d(*args, **kwargs)      (name: dotted namespace + function)
    op:+                     args[0] + args[1]  ("r+": reflected, "u-": unary)
    attr:T                   args[0].T
    index:select             Python indexing: select, slice, index, setitem_index, getitem, setitem

tracejit's own ops (``tracejit::get_attr`` ...) have no target: ``None`` in memory, ``""`` in
a file. Which names each kind may carry in a file is checked by serialize/validate.py.
"""
from __future__ import annotations

from ..records import FrozenRecord

KINDS = ("method", "fn", "op", "attr", "index")


class CallTargetError(ValueError):
    """A call target text that is not ``kind:name`` with a known kind."""


class CallTarget(FrozenRecord):
    """``kind``: one of KINDS; ``name``: method / attribute name, dotted function path, operator symbol or
    indexing form."""
    __slots__ = _fields = ("kind", "name")

    def __init__(self, kind: str, name: str):
        if kind not in KINDS:
            raise CallTargetError(f"call target kind {str(kind)[:40]!r} is not one of {', '.join(KINDS)}")
        if not isinstance(name, str) or not name:
            raise CallTargetError(f"call target {kind}: has no name")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "name", name)

    @staticmethod
    def parse(text: str) -> "CallTarget":
        """``"method:view"`` -> ``CallTarget("method", "view")``; raises CallTargetError on anything else."""
        if not isinstance(text, str):
            raise CallTargetError(f"a call target is a 'kind:name' string, not {type(text).__name__}")
        kind, sep, name = text.partition(":")
        if not sep:
            raise CallTargetError(f"call target {text[:60]!r} is not of the form 'kind:name' "
                                  f"(kinds: {', '.join(KINDS)})")
        return CallTarget(kind, name)

    @property
    def short_name(self) -> str:
        """The last dotted part of the name: ``relu`` for ``fn:torch._C._nn.relu``."""
        return self.name.rpartition(".")[2]

    @property
    def namespace(self) -> str:
        """What precedes the last dot of a ``fn`` name: ``torch._C._nn`` for ``fn:torch._C._nn.relu``."""
        return self.name.rpartition(".")[0]

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


def method(name: str) -> CallTarget:
    return CallTarget("method", name)


def function(path: str) -> CallTarget:
    return CallTarget("fn", path)


def operator(symbol: str) -> CallTarget:
    return CallTarget("op", symbol)


def attribute(name: str) -> CallTarget:
    return CallTarget("attr", name)


def indexing(form: str) -> CallTarget:
    return CallTarget("index", form)


def as_target(value) -> CallTarget | None:
    """A Node's target from what its maker passed: a CallTarget, its text, or None / "" for none."""
    if value is None or isinstance(value, CallTarget):
        return value
    if value == "":
        return None
    return CallTarget.parse(value)


def target_text(target: CallTarget | None) -> str:
    """The file's text of a node's target (``""`` for none)."""
    return "" if target is None else str(target)
