"""Snapshots of the state a run can change: a module's buffers and the RNG."""
from __future__ import annotations

import torch


class ModuleState:
    """Snapshot of the module's buffers (BatchNorm statistics ...) and the CPU RNG; ``restore()`` puts them back.

    The checker and retracing run the user's module; that must not change the module or the
    random stream the user sees.
    """

    def __init__(self, module):
        self.buffers = [(b, b.clone()) for b in module.buffers()] if module is not None else []
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def restore(self) -> None:
        with torch.no_grad():
            for b, saved in self.buffers:
                b.copy_(saved)
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
