"""Input dicts whose key set forward reads: the program checks their exact keys, in order.

A traced program checks a dict input by the keys the trace indexed (``d.keys() >= {...}``: a superset is
accepted, as torch.jit.trace accepts it). That is right while forward only indexes the dict by name
(``d["input_ids"]``), and silently wrong when forward reads the key set itself: ``sum(d.values())``,
``for k in d``, ``len(d)``, ``"labels" in d`` (False at the trace), ``d.get("mask")`` of an absent key,
``{**d}``: eager's answer follows the keys the caller passes, the program's the keys the trace saw (hunt20).

While a trace runs, each plain ``dict`` among forward's inputs (nested in tuples, lists and dicts too) is a
``WatchedDict``: a dict subclass whose key-set reads note the input's path and the user's line
(``isinstance(d, dict)`` holds; ``type(d) is dict`` does not while tracing; torch.utils._pytree treats it as a
dict). After forward, the
paths go to ``Graph.exact_keys`` ((path, line) pairs, saved in files), and the generated code checks such an
input's keys with ``list(d) == [keys of the trace]``: another key set raises ArgumentValueError naming the
line that read it. Reads by tracejit itself (flattening the inputs, fingerprints) do not count.

Decision (documented in docs/COMPAT.md): indexing by name keeps torch.jit's superset rule; reading the key set
makes the keys part of the trace, as the tensors' shapes are.
"""
from __future__ import annotations

import sys

from torch.utils import _pytree

from ..ir import SourceLoc
from .source import _skipped


def _user_loc():
    """The innermost frame that is not tracejit's (a stand-in: ``len``), torch's or the standard library's."""
    f = sys._getframe(3)   # (_user_loc, _tj_note, the dict method)
    while f is not None:
        name = f.f_code.co_filename
        if not _skipped(name):
            return SourceLoc(name, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return None


class WatchedDict(dict):
    """A plain dict input while forward runs: reading its key set is noted (see the module)."""

    _tj_watched = True   # tracejit's pytree flattens it as a plain dict, by dict's own keys
    _tj_path = ""        # (class defaults: ``type(d)(...)`` in forward makes one that notes nothing)
    _tj_reads = None

    def _tj_note(self):
        reads = self._tj_reads
        if reads is None or self._tj_path in reads:
            return
        loc = _user_loc()
        if loc is not None:
            reads[self._tj_path] = f"{loc.filename}:{loc.lineno}"

    def __iter__(self):
        self._tj_note()
        return dict.__iter__(self)

    def __len__(self):
        self._tj_note()
        return dict.__len__(self)

    def __reversed__(self):
        self._tj_note()
        return dict.__reversed__(self)

    def keys(self):
        self._tj_note()
        return dict.keys(self)

    def values(self):
        self._tj_note()
        return dict.values(self)

    def items(self):
        self._tj_note()
        return dict.items(self)

    def __contains__(self, key):
        found = dict.__contains__(self, key)
        if not found:   # a key the caller may pass later: the answer depends on the key set
            self._tj_note()
        return found

    def get(self, key, default=None):
        if not dict.__contains__(self, key):
            self._tj_note()
        return dict.get(self, key, default)

    def __eq__(self, other):
        self._tj_note()
        return dict.__eq__(self, other)

    def __ne__(self, other):
        self._tj_note()
        return dict.__ne__(self, other)

    __hash__ = None

    def copy(self):
        self._tj_note()
        return dict(dict.items(self))

    def __or__(self, other):
        self._tj_note()
        return dict.__or__(dict(dict.items(self)), other)

    def __ror__(self, other):
        self._tj_note()
        return dict.__ror__(dict(dict.items(self)), other)

    def popitem(self):
        self._tj_note()
        return dict.popitem(self)


def _register_with_torch_pytree() -> None:
    """torch.utils._pytree looks container types up by ``type(x)``: forward's ``tree_map`` over an input dict
    must see a dict, not a leaf."""
    if WatchedDict not in _pytree.SUPPORTED_NODES:
        _pytree.register_pytree_node(WatchedDict, lambda d: (list(d.values()), list(d.keys())),   # (a read)
                                     lambda values, keys: dict(zip(keys, values)),
                                     serialized_type_name="tracejit.WatchedDict")


_register_with_torch_pytree()


def watch(args: tuple, kwargs: dict, names) -> tuple:
    """``(args, kwargs)``: each plain dict among the inputs replaced by a WatchedDict (noting nothing until
    ``arm``); ``names``: the graph's parameter names (the paths' roots, as the generated code names them)."""
    names = list(names)

    def wrap(value, path):
        if type(value) is dict:
            out = WatchedDict((k, wrap(v, f"{path}[{k!r}]")) for k, v in dict.items(value))
            out._tj_path, out._tj_reads = path, None
            return out
        if type(value) is list:
            return [wrap(v, f"{path}[{i!r}]") for i, v in enumerate(value)]
        if type(value) is tuple:
            return tuple(wrap(v, f"{path}[{i!r}]") for i, v in enumerate(value))
        return value

    new_args = tuple(wrap(a, names[i] if i < len(names) else f"args_{i}") for i, a in enumerate(args))
    n = len(args)
    new_kwargs = {k: wrap(v, names[n + j] if n + j < len(names) else k) for j, (k, v) in enumerate(kwargs.items())}
    return new_args, new_kwargs


def arm(args: tuple, kwargs: dict, reads: dict | None) -> None:
    """Forward starts (``reads``: path -> "file:line", filled from now on) or ends (None: tracejit flattens the
    outputs and fingerprints the inputs; nothing more is noted)."""
    def walk(value):
        if type(value) is WatchedDict:
            value._tj_reads = reads
            for v in dict.values(value):
                walk(v)
        elif type(value) in (list, tuple):
            for v in value:
                walk(v)
    for a in args:
        walk(a)
    for v in kwargs.values():
        walk(v)
