"""Autocast regions: ``with torch.autocast(...)`` inside traced code is recorded and replayed.

Under autocast, eager runs ``linear`` / ``matmul`` in the autocast dtype; the trace records the
plain op, so replaying it outside the block would compute in float32. Each node recorded while
the autocast state differs from the one the trace started in carries ``attrs["autocast"]``:
one ``"<device>:<dtype>"`` (or ``"<device>:off"``) per device whose state is set, and codegen
opens the matching ``torch.autocast(...)`` block (capture_emit).
"""
from __future__ import annotations

import torch

# how the loader checks the states a node carries and codegen opens them: ir/regions.py
from ..ir.regions import AUTOCAST_DEVICES as DEVICES

AUTOCAST = torch.amp.autocast_mode.autocast   # torch.autocast


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
