"""A submodule's training flag, named by its path below the root (module_flags.py records the reads): the
pattern a path in a file must match, and the generated code's read of the flag. Apart from module_flags.py,
which installs tracing's stand-ins, so that loading and compiling a program do not import them."""
from __future__ import annotations

from ..patterns import LazyPattern

# a path below the root as a file may hold it: module names (attribute names or Sequential indices)
PATH_RE = LazyPattern(r"[A-Za-z0-9_]{1,200}(\.[A-Za-z0-9_]{1,200}){0,63}")


def predicate(path: str) -> str:
    """``self._modules['a']._modules['0'].training``: the generated code's read of submodule ``path``'s flag."""
    return "self" + "".join(f"._modules[{name!r}]" for name in path.split(".")) + ".training"
