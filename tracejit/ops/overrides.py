"""The one reviewed table of ATen op facts that torch's tags and schemas do not give (ops/aten.py reads it).

OVERRIDES: op name -> (fact, value, reason). Facts:
  "unmergeable"  two calls with equal arguments may return different values, though ATen tags no randomness
RANDOM_SWITCHES: the arguments that turn a seeded op's draws off ("true": drawn only when truthy,
"nonzero": only when not 0), read by ops.draws_random against each op's schema.
"""
from __future__ import annotations

_UNINITIALIZED = "returns uninitialized memory: two calls are two different tensors (CSE must not merge them)"
_TRAIN = "draws only in training (its `train` argument) and with a nonzero dropout probability"

OVERRIDES: dict[str, tuple[str, object, str]] = {
    "empty": ("unmergeable", True, _UNINITIALIZED),
    "empty_like": ("unmergeable", True, _UNINITIALIZED),
    "new_empty": ("unmergeable", True, _UNINITIALIZED),
    "empty_strided": ("unmergeable", True, _UNINITIALIZED),
    "new_empty_strided": ("unmergeable", True, _UNINITIALIZED),
    "empty_permuted": ("unmergeable", True, _UNINITIALIZED),
}

# arguments that switch a seeded op's randomness off (ATen tags the op nondeterministic_seeded either way):
# argument name -> the test its value must pass for the op to draw
RANDOM_SWITCHES = {"train": "true", "training": "true", "dropout": "nonzero", "dropout_p": "nonzero"}
RANDOM_SWITCH_REASON = _TRAIN


def fact(name: str, which: str):
    """The override for op ``name``'s fact ``which`` (None when the table says nothing)."""
    entry = OVERRIDES.get(name)
    return entry[1] if entry is not None and entry[0] == which else None
