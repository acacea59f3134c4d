"""Autocast regions: ``with torch.autocast(...)`` inside traced code is recorded and replayed.

Under autocast, eager runs ``linear`` / ``matmul`` in the autocast dtype; the trace records the
plain op, so replaying it outside the block would compute in float32. Each node recorded while
the autocast state differs from the one the trace started in carries ``attrs["autocast"]``:
one ``"<device>:<dtype>"`` (or ``"<device>:off"``) per device whose state is set, and codegen
opens the matching ``torch.autocast(...)`` block (capture_emit).
"""
from __future__ import annotations

import torch

from ..patterns import LazyPattern

AUTOCAST = torch.amp.autocast_mode.autocast   # torch.autocast
DEVICES = ("cpu", "cuda")
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
_ENTRY = LazyPattern(rf"^({'|'.join(DEVICES)}):(off|{'|'.join(DTYPES)})$")


def current() -> dict:
    """device -> autocast dtype name, for the devices where autocast is on."""
    state = {}
    for device in DEVICES:
        try:
            if torch.is_autocast_enabled(device):
                state[device] = str(torch.get_autocast_dtype(device)).replace("torch.", "")
        except (RuntimeError, TypeError):   # pragma: no cover - a torch without this device type
            continue
    return state


def region(entry: dict, open_devices: list) -> list | None:
    """The ``attrs["autocast"]`` value for a node recorded now, or None when the traced code set no autocast
    state of its own (no block open, same state as the trace's start: the caller's state applies)."""
    if not entry and not open_devices:
        return None   # the common case, checked without asking torch per node
    now = current()
    if now == entry and not open_devices:
        return None
    return [f"{d}:{now.get(d, 'off')}" for d in DEVICES if d in now or d in entry or d in open_devices]


def valid(value) -> bool:
    return isinstance(value, list) and 0 < len(value) <= len(DEVICES) and all(
        isinstance(v, str) and _ENTRY.match(v) for v in value)


def header_parts(value: list) -> list[str]:
    """``torch.autocast('cpu', dtype=torch.bfloat16)`` / ``torch.autocast('cpu', enabled=False)`` per entry."""
    parts = []
    for entry in value:
        m = _ENTRY.match(entry)
        if m is None:
            raise ValueError(f"codegen: malformed autocast state {entry!r}")
        device, dtype = m.groups()
        parts.append(f"torch.autocast({device!r}, enabled=False)" if dtype == "off"
                     else f"torch.autocast({device!r}, dtype=torch.{dtype})")
    return parts
