"""The source line that writes a module's attribute: the regexes for such a line and the search of the traced
classes' code for it (python_state.py's and outer_state.py's errors name that line).

>>> import re
>>> any(re.search(p, "self.step += 1") for p in _write_patterns("self", "step"))
True
>>> any(re.search(p, "self.cache.append(x)") for p in _write_patterns("self", "cache"))
True
"""
from __future__ import annotations

import re

from torch import nn

from . import held_state


# the methods that write into a container: one set for the regex here and global_reads' bytecode scan
MUTATING_METHODS = frozenset({"append", "appendleft", "add", "update", "pop", "popleft", "popitem", "extend",
                              "extendleft", "insert", "remove", "discard", "clear", "setdefault", "sort", "reverse",
                              "rotate", "__setitem__", "__delitem__"})
_MUTATORS = "|".join(sorted(MUTATING_METHODS))


def _write_patterns(target: str, key) -> list:
    """Regexes for a line that writes ``<target>`` (``self.step += 1``, ``self.w.data = ...``, ``self.cache[k] = v``,
    ``self.mems.append(x)``, ``random.shuffle(self.order)``; ``self.head.eval()`` for a training flag)."""
    t = re.escape(target)
    if key == "training":
        return [rf"{t}\.(train|eval)\(", rf"{t}\.training\s*=[^=]"]
    name = rf"{t}\.{re.escape(key[1] if isinstance(key, tuple) else key)}\b"
    calls = r"\w+" if isinstance(key, held_state.DrawnKey) else f"({_MUTATORS})"   # a generator: any call draws
    return [rf"{name}(\.data)?\s*(\[[^\]]*\])?\s*([-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=)", rf"{name}\.{calls}\(",
            rf"\b(shuffle|sort|heappush|heappop|insort)\(\s*{name}"]


def _assignment_line(root: nn.Module | None, path: str, key):
    """The line of the traced classes' code that writes the changed attribute, outside ``__init__``: searched
    in the class of the module itself and of each module above it (``self.head.eval()`` in the parent)."""
    if root is None:
        return None
    cls = path[len("<class "):-1] if path.startswith("<class ") else None   # held_state's class entries
    parts = path.split(".") if path and cls is None else []
    for depth in range(len(parts), -1, -1):   # the module itself first, then its parents
        try:
            owner = root.get_submodule(".".join(parts[:depth]))
        except AttributeError:   # a held object's path (held_state.py): its holder is further up
            continue
        rel = ".".join(parts[depth:])
        target = "self" + (f".{rel}" if rel else "")
        patterns = [re.compile(p) for p in _write_patterns(target, key)]
        if cls is not None:   # type(self).n += 1, self.__class__.n = ..., Model.n += 1
            patterns = [re.compile(p) for t in ("type(self)", "self.__class__", cls.split(".")[-1])
                        for p in _write_patterns(t, key)]
        found = held_state.line_outside_init(type(owner), patterns)
        if found is not None:
            return found
    return None
