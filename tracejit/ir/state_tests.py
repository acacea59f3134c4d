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
import importlib
import pkgutil

import torch
import torch.backends

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
    return parse(test) is not None or parse_backends(test) is not None


# ---- torch.backends flags (trace/backend_flags.py) ----
_BACKENDS_TEST = LazyPattern(r"(str\()?torch\.backends\.([a-z][a-z0-9_]{0,40})\.(?:(matmul)\.)?([a-z][a-z0-9_]{0,60})"
                             r"(\(\))?(\))?")


def backends_reader_name(name: str) -> bool:
    """A torch.backends function that answers process state when called without arguments."""
    return name.startswith(PREFIXES) or name.endswith("_enabled") or name == "version" or \
        name.startswith("preferred_")


def parse_backends(test) -> tuple | None:
    """(module, attribute path, call, by_name) of a ``torch.backends`` flag test, or None: the module must be a
    public torch.backends submodule, a call must be a reader's (backends_reader_name), ``matmul`` only under
    ``cuda``."""
    if not isinstance(test, str):
        return None
    m = _BACKENDS_TEST.fullmatch(test)
    if m is None or bool(m.group(1)) != bool(m.group(6)) or m.group(2) not in _backends_modules():
        return None
    if m.group(3) is not None and m.group(2) != "cuda" or m.group(5) and not backends_reader_name(m.group(4)):
        return None
    return m.group(2), m.group(3), m.group(4), bool(m.group(5)), bool(m.group(1))


@functools.lru_cache(maxsize=1)
def _backends_modules() -> frozenset:
    return frozenset(i.name for i in pkgutil.iter_modules(torch.backends.__path__) if not i.name.startswith("_"))


def import_backend(test) -> None:
    """Import the torch.backends module a flag test names (a public submodule: parse_backends), so
    ``torch.backends.<module>`` resolves in generated code in a process that never imported it."""
    parsed = parse_backends(test)
    if parsed is not None:
        importlib.import_module(f"torch.backends.{parsed[0]}")


def backends_read(test):
    """A zero-argument callable answering ``test`` (a torch.backends flag test) now."""
    module, sub, name, call, by_name = parse_backends(test)
    def read():
        obj = getattr(torch.backends, module, None) or importlib.import_module(f"torch.backends.{module}")
        value = getattr(getattr(obj, sub) if sub else obj, name)
        value = value() if call else value
        return str(value) if by_name else value
    return read
