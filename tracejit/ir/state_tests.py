"""Guards on global torch state: ``torch.is_grad_enabled()``, ``torch.get_default_dtype()``, ...

A read of global state is a call of a ``torch`` function whose name starts with ``is_``, ``are_``
or ``get_`` made with no argument or with one device-type name (``torch.is_autocast_enabled('cpu')``).
Such a guard's ``test`` is its predicate text itself: ``torch.is_grad_enabled()``, or
``str(torch.get_default_dtype())`` for a dtype / device answer (compared by name). The readers are
found in ``torch`` by name (``readers()``), so a reader added by a later torch is guarded without
anyone editing a list; only readers whose answer is no state of the process (a file path, a
module, the RNG state tensor) are left out, here.
"""
from __future__ import annotations

import functools

import torch

from ..patterns import LazyPattern

PREFIXES = ("is_", "are_", "get_")
# answers that are not a setting of the process: the package's path, a module object, a tensor (RNG state)
NOT_STATE = frozenset({"get_file_path", "get_device_module", "get_rng_state"})
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "hpu", "xla", "ipu", "meta")
_TEST = LazyPattern(r"(str\()?torch\.([a-z][a-z0-9_]{0,60})\((?:'([a-z]{2,8})')?\)(\))?")


@functools.lru_cache(maxsize=1)
def readers() -> frozenset:
    """The names of the ``torch`` functions read as global state (by prefix, not a hand list)."""
    out = set()
    for name in dir(torch):
        if not name.startswith(PREFIXES) or name in NOT_STATE:
            continue
        obj = getattr(torch, name, None)
        if callable(obj) and not isinstance(obj, type):
            out.add(name)
    return frozenset(out)


def state_test(name: str, device: str | None, by_name: bool) -> str:
    """The test text (= predicate) of a guard on ``torch.<name>(<device>)``."""
    call = f"torch.{name}({device!r})" if device is not None else f"torch.{name}()"
    return f"str({call})" if by_name else call


def parse(test) -> tuple | None:
    """(name, device or None, by_name) of a state test, or None when ``test`` is not one."""
    if not isinstance(test, str):
        return None
    m = _TEST.fullmatch(test)
    if m is None or bool(m.group(1)) != bool(m.group(4)) or m.group(2) not in readers():
        return None
    if m.group(3) is not None and m.group(3) not in DEVICE_TYPES:
        return None
    return m.group(2), m.group(3), bool(m.group(1))


def is_state_test(test) -> bool:
    return parse(test) is not None
