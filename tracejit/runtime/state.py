"""Snapshots of the state a run can change: a module's buffers, and the checker's private random stream."""
from __future__ import annotations

import torch


class ModuleState:
    """Snapshot of the module's buffers (BatchNorm statistics ...); ``restore()`` puts them back.

    The checker and retracing run the user's module; that must not change the module. Their random
    draws come from a ``PrivateRandomness`` (``rng``), rewound by ``restore()`` too, so torch's
    global generator, which other threads draw from, is never set back.
    """

    def __init__(self, module, rng=None):
        self.buffers = [(b, b.clone()) for b in module.buffers()] if module is not None else []
        self.versions = [b._version for b, _ in self.buffers]   # each buffer's version when copied (restore_written)
        self.rng = rng

    def restore_written(self) -> None:
        """Put back only the buffers written since the snapshot (their version moved): a program that writes
        none sees no write (optimize_for_inference(backend="auto") puts the caller's buffers back this way)."""
        with torch.no_grad():
            for i, (b, saved) in enumerate(self.buffers):
                if b._version != self.versions[i]:
                    b.copy_(saved)
                    self.versions[i] = b._version

    def restore(self) -> None:
        with torch.no_grad():
            for b, saved in self.buffers:
                b.copy_(saved)
        if self.rng is not None:
            self.rng.rewind()
