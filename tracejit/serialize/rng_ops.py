"""Loader validation for the program's own random number generation (trace/rng_record.py): a seed is an int
that fits torch's generator, a generator's device is a device name, and a generator value comes only from
``tracejit::new_generator``. Codegen writes ``torch.manual_seed`` / ``torch.Generator`` / ``.manual_seed``
from fixed text."""
from __future__ import annotations

import torch

from ..errors import LoadError
from ..ir import Value
from ..ir.state_tests import DEVICE_TYPES
from ..ops.names import MANUAL_SEED, NEW_GENERATOR, SEED_GENERATOR

OPS = {MANUAL_SEED, NEW_GENERATOR, SEED_GENERATOR}
_SEEDS = (-2 ** 63, 2 ** 64)   # what torch.manual_seed accepts


def _check_seed(node, at: str) -> None:
    seed = node.attrs.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or not _SEEDS[0] <= seed < _SEEDS[1]:
        raise LoadError(f"{at}: a seed must be an int in [-2**63, 2**64), found {str(seed)[:40]}")


def is_generator(v) -> bool:
    return isinstance(v, Value) and getattr(v.type, "kind", None) == "generator"


def check_node(node, at: str) -> None:
    if node.kwargs:
        raise LoadError(f"{at}: {node.op} takes no keyword arguments")
    if node.op == NEW_GENERATOR:
        if node.args or len(node.outputs) != 1 or not is_generator(node.outputs[0]):
            raise LoadError(f"{at}: {node.op} takes no arguments and defines one generator")
        device = node.attrs.get("device")
        try:
            parsed = torch.device(device) if isinstance(device, str) and len(device) <= 32 else None
        except RuntimeError:
            parsed = None
        if parsed is None or parsed.type not in DEVICE_TYPES:
            raise LoadError(f"{at}: a generator's device must be a device name, found {str(device)[:40]!r}")
        return
    _check_seed(node, at)
    if any(v is not None for v in node.outputs):
        raise LoadError(f"{at}: {node.op} defines no values")
    if node.op == MANUAL_SEED and node.args:
        raise LoadError(f"{at}: {node.op} takes no arguments")
    if node.op == SEED_GENERATOR and (len(node.args) != 1 or not is_generator(node.args[0])):
        raise LoadError(f"{at}: {node.op} takes one generator made by tracejit::new_generator")
