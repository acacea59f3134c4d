"""The one reviewed table of ATen op facts that torch's tags and schemas do not give (ops/aten.py reads it).

OVERRIDES: (bare op name, fact) -> (value, reason); ``_listed`` writes one entry per op of a group that
shares its reason. Facts:
  "unmergeable"  two calls with equal arguments may return different values, though ATen tags no randomness
  "fresh"        every call returns new memory, though ATen tags the op neither pointwise nor reduction
                 (composite and matmul-family ops: ops.is_fresh)
RANDOM_SWITCHES: the arguments that turn a seeded op's draws off ("true": drawn only when truthy,
"nonzero": only when not 0), read by ops.draws_random against each op's schema.
"""
from __future__ import annotations

_UNINITIALIZED = "returns uninitialized memory: two calls are two different tensors (CSE must not merge them)"
_TRAIN = "draws only in training (its `train` argument) and with a nonzero dropout probability"
_ALLOCATES = ("computes its result into a tensor it allocates (a matmul / convolution / normalization / "
              "softmax / concatenation): never its input or a view of it, for any arguments")


def _listed(fact: str, value, reason: str, *names: str) -> dict:
    return {(name, fact): (value, reason) for name in names}


OVERRIDES: dict[tuple[str, str], tuple[object, str]] = {
    **_listed("unmergeable", True, _UNINITIALIZED,
              "empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"),
    **_listed("fresh", True, _ALLOCATES,
              "linear", "conv1d", "conv2d", "conv3d", "matmul", "mm", "bmm", "addmm", "baddbmm", "softmax",
              "log_softmax", "layer_norm", "group_norm", "cat", "stack"),
}

# arguments that switch a seeded op's randomness off (ATen tags the op nondeterministic_seeded either way):
# argument name -> the test its value must pass for the op to draw
RANDOM_SWITCHES = {"train": "true", "training": "true", "dropout": "nonzero", "dropout_p": "nonzero"}
RANDOM_SWITCH_REASON = _TRAIN


def fact(name: str, which: str):
    """The override for op ``name``'s fact ``which`` (None when the table says nothing)."""
    entry = OVERRIDES.get((name, which))
    return entry[0] if entry is not None else None
