"""Guard nodes that are built the same way by the tracer, the decoder (old files) and migrate, and the
submodule training flag a guard names by its path below the root (trace/module_flags.py records the reads):
the test a path in a file must pass (serialize/guards.py) and the generated code's read (codegen/guards.py).

>>> training_guard(False).attrs["expected"]
False
"""
from __future__ import annotations

from .graph import Node
from .ops import GUARD
from ..patterns import ascii_word


def is_flag_path(path) -> bool:
    """A path below the root as a file may hold it: up to 64 module names joined by dots, each 1-200 ASCII
    letters, digits, ``_`` or ``-`` (torchvision's RegNet names its blocks ``block4-8``; ``nn.Module.add_module``
    takes more, but a name with quotes or brackets is refused: default-deny, though the generated code reads each
    name as a quoted dict key, ``flag_predicate``, never as code)."""
    if not isinstance(path, str):
        return False
    parts = path.split(".")
    return len(parts) <= 64 and all(ascii_word(part.replace("-", "_"), 200) for part in parts)


def training_guard(training: bool) -> Node:
    """The guard on the module's training flag, first in a root method's graph."""
    mode = "train" if training else "eval"
    return Node(GUARD, "", (), attrs={"kind": "training", "test": "training", "expected": bool(training),
                                      "seen": bool(training), "what": f"the module was traced in {mode} mode",
                                      "line": ""}, effectful=True)


def flag_predicate(path: str) -> str:
    """``self._modules['a']._modules['0'].training``: the generated code's read of submodule ``path``'s flag."""
    return "self" + "".join(f"._modules[{name!r}]" for name in path.split(".")) + ".training"
