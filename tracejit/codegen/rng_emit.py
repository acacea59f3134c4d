"""Codegen for the program's own random number generation (trace/rng_record.py).

    tracejit::manual_seed[seed=k]()          torch.manual_seed(k)
    %g = tracejit::new_generator[device]()   g = torch.Generator('cpu')
    tracejit::seed_generator[seed=k](%g)     g.manual_seed(k)

Seeds are ints and devices are parsed by ``torch.device`` before they are written: a file holds data only.
"""
from __future__ import annotations

import torch

from ..ops.names import MANUAL_SEED, NEW_GENERATOR, SEED_GENERATOR

OPS = {MANUAL_SEED, NEW_GENERATOR, SEED_GENERATOR}


def _seed(node) -> int:
    seed = node.attrs["seed"]
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"codegen: {node.op} needs an int seed, got {type(seed).__name__}")
    return int(seed)


def node_expr(gen, node) -> str:
    if node.op == MANUAL_SEED:
        return f"torch.manual_seed({_seed(node)!r})"
    if node.op == NEW_GENERATOR:
        return f"torch.Generator({str(torch.device(node.attrs['device']))!r})"
    return f"{gen.expr(node.args[0])}.manual_seed({_seed(node)!r})"
